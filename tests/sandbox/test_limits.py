"""Bounds: finite timeouts at load, a keeper that a cancelled command cannot leave busy, per-trial
disk budget, free disk at start, the task image cache budget (the work product's checks:
test_workproduct.py)."""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest
from pydantic import ValidationError

from swerl.errors import EnvironmentProblem, SandboxError
from swerl.sandbox import Outcome, SandboxConfig, SandboxManager
from swerl.tasks import load_task
from swerl.tasks.task_folder import MalformedTask

from ._support import containers_of, copy_task, fixture_task, run


@pytest.mark.parametrize("value", ["inf", "nan", "1e12", "-inf"])
@pytest.mark.parametrize("field", ["agent.timeout_sec", "verifier.timeout_sec", "environment.build_timeout_sec"])
def test_non_finite_or_absurd_timeouts_are_rejected_at_load_naming_the_field(tmp_path, field, value):
    folder = copy_task("add", tmp_path)
    section, key = field.split(".")
    text = (folder / "task.toml").read_text()
    text = text.replace(f"[{section}]\n", f"[{section}]\n{key} = {value}\n", 1)
    text = "\n".join(line for line in text.splitlines() if not (line.startswith(key) and value not in line)) + "\n"
    (folder / "task.toml").write_text(text)
    with pytest.raises(MalformedTask, match=f"field '{field}'"):
        load_task(folder)


@pytest.mark.parametrize("field", ["verifier_timeout_s", "docker_timeout_s", "start_timeout_s", "disk_poll_s"])
def test_sandbox_config_rejects_non_finite_deadlines(field):
    for value in (float("inf"), float("nan"), 1e12):
        with pytest.raises(ValidationError, match=field):
            SandboxConfig(**{field: value})


@pytest.mark.docker
def test_a_cancelled_command_leaves_the_keeper_free_and_the_next_verification_works(docker_client):
    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
            async with mgr.sandbox(fixture_task("add")) as sb:
                pending = asyncio.create_task(sb.exec("sleep 120", timeout_s=300))
                await asyncio.sleep(0.5)
                pending.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await pending
                began = time.monotonic()
                echo = await sb.exec("echo next", timeout_s=10)
                await sb.run_solution()
                verdict = await sb.verify()
                return echo, verdict, time.monotonic() - began, mgr.run_id

    echo, verdict, seconds, run_id = run(body())
    assert echo.exit_code == 0 and echo.output == "next\n"
    assert verdict.outcome is Outcome.passed and verdict.reward == 1.0
    assert seconds < 15  # a busy keeper made this wait for the verifier timeout (20 s here)
    assert containers_of(docker_client, run_id) == []


@pytest.mark.docker
def test_a_trial_past_storage_mb_is_killed_and_ends_as_disk_limit(docker_client, tmp_path):
    folder = copy_task("add", tmp_path)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("storage_mb = 1024\n", "storage_mb = 20\n"))

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False, disk_poll_s=0.3)) as mgr:
            try:
                async with mgr.sandbox(load_task(folder)) as sb:
                    with pytest.raises(SandboxError) as caught:
                        await sb.exec("touch /etc/ld.so.preload; dd if=/dev/zero of=/tmp/fill bs=1M count=80 status=none; "
                                      "sleep 20", timeout_s=60)
                    state = docker_client.api.inspect_container(sb.container_id)["State"]
                    with pytest.raises(SandboxError) as verifying:
                        await sb.verify()
                    return caught.value, state, verifying.value, mgr.run_id
            finally:
                await mgr.engines[0].opened.reaper.drain(30)

    err, state, verifying, run_id = run(body())
    assert err.outcome is Outcome.disk_limit  # mask until a control run says whose fault it is
    assert re.search(r"holds \d+ MiB on disk, over \[environment\] storage_mb = 20", str(err)) and not state["Running"]
    # The stopped container is scanned all the same: the failed verification keeps its tamper reasons.
    assert verifying.outcome is Outcome.disk_limit and verifying.tamper == ["loader: added /etc/ld.so.preload"]
    assert containers_of(docker_client, run_id) == []


@pytest.mark.docker
def test_a_trial_past_storage_mb_in_empty_files_is_killed_and_blamed_on_the_attempt(docker_client, tmp_path):
    """Empty files cost next to nothing in allocated blocks but one inode each of the host's fixed
    supply (16 KiB of disk per inode on ext4's default): 4,000 of them are ~62 MiB of that supply."""
    from swerl.sandbox.control import with_control
    from swerl.sandbox.manager import failed_record
    from swerl.sandbox.types import Blame, FailureClass, TrialTimings

    folder = copy_task("add", tmp_path)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("storage_mb = 1024\n", "storage_mb = 20\n"))
    task = load_task(folder)

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False, disk_poll_s=0.3)) as mgr:
            try:
                async with mgr.sandbox(task) as sb:
                    with pytest.raises(SandboxError) as caught:
                        await sb.exec("mkdir /root/f && cd /root/f && for i in 1 2 3 4; do touch $i-{1..1000}; done; "
                                      "sleep 20", timeout_s=60)
                record = failed_record(task.name, "inode-flood", caught.value, TrialTimings(), [], acted=True)
                return caught.value, await with_control(mgr, task, record), mgr.run_id
            finally:
                await mgr.engines[0].opened.reaper.drain(30)

    err, record, run_id = run(body())
    assert err.outcome is Outcome.disk_limit
    assert re.search(r"holds [\d,]+ files and folders \(= \d+ MiB at the file system's [\d.]+ KiB per inode\), "
                     r"over \[environment\] storage_mb = 20", str(err)), str(err)
    assert record.failure_class is FailureClass.zero and record.blame is Blame.attempt  # the control read a reward
    assert containers_of(docker_client, run_id) == []


@pytest.mark.docker
def test_too_little_free_disk_on_dockers_data_root_is_an_environment_problem(docker_client):
    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, min_free_disk_mb=1 << 40)):
            pass

    with pytest.raises(EnvironmentProblem, match=r"/var/lib/docker: \d+ MiB free .* needs 1099511627776 MiB") as caught:
        run(body())
    assert caught.value.exit_code == 3


@pytest.mark.docker
def test_task_image_cache_prunes_least_recently_used_beyond_its_budget(docker_client, tmp_path):
    from swerl.sandbox.deployment.image_cache import prune_task_images, record_use

    repo = f"swerl-task-test-{uuid.uuid4().hex[:8]}"
    usage = tmp_path / "usage.json"
    tags = []
    for name in ("old", "used", "new"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "Dockerfile").write_text(
            f"FROM python:3.10-slim\nRUN head -c 3000000 /dev/urandom > /{name}.bin\n"
        )
        tag = f"{repo}:{name}"
        docker_client.images.build(path=str(tmp_path / name), tag=tag, network_mode="none", rm=True)
        record_use(tag, usage)
        tags.append(tag)
        time.sleep(0.01)
    holder = docker_client.containers.create(tags[1], ["true"], labels={"swerl.run": "image-cache-test"})
    try:
        removed = prune_task_images(docker_client, budget_mb=4, keep={tags[2]}, repo=repo, usage_file=usage)
        left = sorted(t for i in docker_client.images.list(name=repo) for t in i.tags)
    finally:
        holder.remove(force=True)
        for tag in tags:
            try:
                docker_client.images.remove(tag)
            except Exception:  # noqa: BLE001 - already pruned
                pass
    assert removed == [tags[0]]  # the oldest; `used` has a container, `new` is kept by the caller
    assert left == sorted(tags[1:])
    assert docker_client.images.get("python:3.10-slim")  # base images are never candidates


def test_verification_mode_follows_the_run_then_the_task():
    from swerl.sandbox.runtime.verification import verification_mode

    task = fixture_task("add")

    def with_verifier(**fields):
        verifier = task.config.verifier.model_copy(update=fields)
        return task.model_copy(update={"config": task.config.model_copy(update={"verifier": verifier})})

    declared, opted_out = with_verifier(artifacts=["/app"]), with_verifier(artifacts=["/app"], same_container=True)
    auto, clean, same = (SandboxConfig(verification=v) for v in ("auto", "clean_room", "same_container"))
    assert [verification_mode(t, auto) for t in (task, declared, opted_out)] == ["same_container", "clean_room", "same_container"]
    assert {verification_mode(t, clean) for t in (task, declared, opted_out)} == {"clean_room"}
    assert {verification_mode(t, same) for t in (task, declared, opted_out)} == {"same_container"}


def test_disk_is_measured_at_any_depth_in_allocated_blocks(tmp_path, monkeypatch):
    """A tree deeper than Python's recursion limit once stopped the disk watch
    (and with it every trial's budget on the engine); ``du`` measures it, a sparse file costs its
    blocks, a hard link counts once; all layers are measured by one ``du`` per count."""
    import os
    import subprocess

    from swerl.sandbox.deployment.limits import DiskUse, Layer, _measure_all, layers_use

    try:
        subprocess.run(["bash", "-c", "mkdir -p $(printf 'd/%.0s' $(seq 1500)) && cd $(printf 'd/%.0s' $(seq 1500)) "
                        "&& head -c 3145728 /dev/urandom > deep && truncate -s 4G sparse && ln deep again "
                        "&& mkdir -p /$OLDPWD/other && touch /$OLDPWD/other/empty"], cwd=tmp_path, check=True)
        deep, other = str(tmp_path / "d"), str(tmp_path / "other")
        used, partial = layers_use({"a": Layer(deep, 4096), "b": Layer(other, 4096), "gone": Layer(deep + "x", 4096)})
        assert 3 * 2**20 <= used["a"].disk_bytes < 3 * 2**20 + 1500 * 8192 + 2**20  # once, the folders, no 4 GiB
        assert used["a"].entries == 1500 + 2  # the folders, deep (and its link, once), sparse
        assert used["b"].entries == 2 and used["gone"] == DiskUse(0, 0, 4096) and partial == set()

        # du skips a folder renamed mid-walk: a fake du that says so, its reading a lower bound
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "du").write_text(f"#!/bin/sh\nprintf '1024\\t{deep}\\n'\n"
                                    f"echo \"du: cannot read directory '{deep}/x': No such file\" >&2; exit 1\n")
        (bin_dir / "du").chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        assert layers_use({"a": Layer(deep, 4096)}) == ({"a": DiskUse(1024, 1024, 4096)}, {"a"})
        assert _measure_all({"a": Layer(deep, 4096)}, {"a": used["a"]}) == {"a": used["a"]}  # never below the last
        assert _measure_all({"a": Layer(deep, 4096)}, {"a": DiskUse(0, 1)}) == {"a": DiskUse(1024, 1024, 4096)}
        assert _measure_all({"a": Layer(other, 4096)}) == {}  # no total printed for it: the engine's SizeRw instead
    finally:  # rm, not pytest's own cleanup: it recurses and would stop at this depth
        subprocess.run(["rm", "-rf", str(tmp_path / "d")], check=True)


def test_the_charge_is_the_larger_of_allocated_blocks_and_inodes_at_the_file_systems_ratio(tmp_path, monkeypatch):
    """Empty files cost no blocks but one inode each; the charge prices an inode at the file
    system's bytes per inode (f_blocks * f_frsize / f_files), 16 KiB where it reports no total."""
    import os
    import subprocess
    from types import SimpleNamespace

    from swerl.sandbox.deployment import limits

    subprocess.run(["bash", "-c", "mkdir e && touch e/f{1..2999} && head -c 1048576 /dev/urandom > blob"],
                   cwd=tmp_path, check=True)
    ext4 = SimpleNamespace(f_blocks=1 << 20, f_frsize=4096, f_files=1 << 18)  # 4 GiB, 262,144 inodes: 16 KiB each
    monkeypatch.setattr(os, "statvfs", lambda path: ext4)
    [use] = limits.layers_use({"t": limits.Layer(str(tmp_path), limits.bytes_per_inode(str(tmp_path)))})[0].values()
    assert use.entries == 3002 and use.bytes_per_inode == 16384  # the folder, e, its 2,999 files, blob
    assert 1 << 20 <= use.disk_bytes < 2 << 20 and use.charged == 3002 * 16384
    assert use.describe() == "holds 3,002 files and folders (= 46 MiB at the file system's 16.0 KiB per inode)"

    dense = SimpleNamespace(f_blocks=1 << 20, f_frsize=4096, f_files=1 << 24)  # 256 B per inode: blocks win
    monkeypatch.setattr(os, "statvfs", lambda path: dense)
    [use] = limits.layers_use({"t": limits.Layer(str(tmp_path), limits.bytes_per_inode(str(tmp_path)))})[0].values()
    assert use.charged == use.disk_bytes and use.describe() == f"holds {use.disk_bytes >> 20} MiB on disk"

    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_blocks=1 << 20, f_frsize=4096, f_files=0))
    assert limits.bytes_per_inode(str(tmp_path)) == limits.DEFAULT_BYTES_PER_INODE == 16384  # btrfs: dynamic inodes
    assert limits.DiskUse(5 << 20).charged == 5 << 20  # SizeRw: bytes alone, no inode count


def test_a_data_root_short_of_inodes_is_short_of_disk(tmp_path, monkeypatch):
    """Free inodes count at the file system's bytes per inode: 1,000 of them at 16 KiB are 15 MiB,
    however many blocks are free."""
    import os
    from types import SimpleNamespace

    from swerl.sandbox.deployment.limits import check_free_disk

    engine = SimpleNamespace(info=lambda: {"DockerRootDir": str(tmp_path)})
    roomy = dict(f_blocks=1 << 26, f_frsize=4096, f_bavail=1 << 25, f_files=1 << 24)  # 256 GiB, 128 GiB free
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(**roomy, f_favail=1000))
    with pytest.raises(EnvironmentProblem, match=r": 15 MiB free on Docker's data root \(its 1,000 free inodes at "
                       r"16\.0 KiB each\), swerl needs 2048 MiB") as caught:
        check_free_disk(engine, 2048)
    assert caught.value.exit_code == 3
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(**roomy, f_favail=1 << 23))
    check_free_disk(engine, 2048)  # 8M free inodes: 128 GiB at 16 KiB each


def test_the_disk_reason_is_recorded_once_and_cannot_be_assigned():
    """The watcher records a disk overrun through ``exceed_disk`` (first reason kept, True only the
    first time: it then kills the container); ``disk_exceeded`` is read-only from outside."""
    from swerl.sandbox.runtime.sandbox import Sandbox

    sb = Sandbox.__new__(Sandbox)
    sb._disk_exceeded = None
    assert sb.disk_exceeded is None
    assert sb.exceed_disk("t: the container wrote 2 GiB, over [environment] storage_mb = 1024; it was killed")
    assert not sb.exceed_disk("a later poll's reason")
    assert sb.disk_exceeded.startswith("t: the container wrote 2 GiB")
    with pytest.raises(AttributeError):
        sb.disk_exceeded = None
