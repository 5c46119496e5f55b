"""Rewards that the agent's environment cannot forge: each environmental exploit, tried as the
agent phase of a HumanEval task made by the importer, scores 0 under clean-room verification,
and the hardened same-container path stops the ones aimed at its wipe and its processes; the
oracle scores 1 in both. Harbor's schema 1.3 forms of the clean room (a separate verifier
environment, its own image, a healthcheck) run end to end from a TaskTrove-style dataset row."""

from __future__ import annotations

import asyncio
import io
import shutil
import tarfile
from pathlib import Path

import pytest

from swerl.sandbox import Outcome, SandboxConfig, SandboxManager
from swerl.sandbox.selftest import run_sandbox_test
from swerl.tasks import import_humaneval, load_task, load_tasks

from ._support import FIXTURES, containers_of, rewrite_in_schema_13, run

pytestmark = pytest.mark.docker

WRONG = "printf 'def has_close_elements(numbers, threshold):\\n    return False\\n' > /app/solution.py\n"
# One shell line per exploit kind; each also leaves a wrong solution in /app.
EXPLOITS = {
    "fake_pytest_on_path": "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/sbin/pytest && chmod 755 /usr/local/sbin/pytest",
    "collect_only_ini_in_root": "printf '[pytest]\\naddopts = --collect-only -q\\n' > /pytest.ini",
    "planted_reward_read_only": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && chmod 555 /logs/verifier /logs",
    "exit_zero_pth": "echo 'import os; os._exit(0)' > \"$(python3 -c 'import site; print(site.getsitepackages()[0])')/zz_exit.pth\"",
    "planted_tests_read_only": (
        "mkdir -p /tests && printf 'mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh"
        " && chmod 444 /tests/test.sh && chmod 555 /tests"
    ),
    "agent_process_rewrites_reward": (
        "setsid sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.01; done'"
        " >/dev/null 2>&1 < /dev/null &"
    ),
}
# What the hardened same-container path must stop (the other kinds are the task harness's job there).
SAME_CONTAINER = ("planted_reward_read_only", "planted_tests_read_only", "agent_process_rewrites_reward")


@pytest.fixture(scope="module")
def humaneval_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("he")
    [folder] = import_humaneval(root, limit=1)
    task = load_task(folder)
    assert task.config.work_product == ["/app"] and task.config.schema_version == "1.3"
    return task


async def _exploit(mgr: SandboxManager, task, name: str):
    async with mgr.sandbox(task) as sb:
        setup = await sb.exec(WRONG + EXPLOITS[name], timeout_s=30)
        assert setup.exit_code == 0, (name, setup.output)
        return name, await sb.verify()


async def _trials(task, verification: str, names):
    config = SandboxConfig(concurrency=3, verification=verification, warm_pool_size=3)
    async with SandboxManager(config) as mgr:
        results = await asyncio.gather(mgr.run_oracle(task), *(_exploit(mgr, task, n) for n in names))
        return results[0], dict(results[1:]), mgr.run_id


def test_clean_room_scores_each_environmental_exploit_zero_and_the_oracle_one(docker_client, humaneval_task):
    oracle, verdicts, run_id = run(_trials(humaneval_task, "auto", list(EXPLOITS)))
    assert (oracle.outcome, oracle.reward, oracle.verification) == (Outcome.passed, 1.0, "clean_room")
    forged = {name: v.outcome.value for name, v in verdicts.items() if v.reward != 0.0}
    assert forged == {}
    assert all(v.verification == "clean_room" and v.outcome is Outcome.failed for v in verdicts.values()), verdicts
    assert containers_of(docker_client, run_id) == []


def test_hardened_same_container_stops_planted_files_and_agent_processes(docker_client, humaneval_task):
    oracle, verdicts, run_id = run(_trials(humaneval_task, "same_container", SAME_CONTAINER))
    assert (oracle.outcome, oracle.reward, oracle.verification) == (Outcome.passed, 1.0, "same_container")
    forged = {name: v.outcome.value for name, v in verdicts.items() if v.reward != 0.0}
    assert forged == {}
    assert all(v.verification == "same_container" and v.outcome is Outcome.failed for v in verdicts.values()), verdicts
    assert containers_of(docker_client, run_id) == []


def test_test_sh_runs_in_the_image_workdir_with_the_work_product_in_both_modes(humaneval_task, tmp_path):
    """The work product replaces /app (the image's WORKDIR) before test.sh runs: a test.sh that
    uses relative paths finds it, in the clean room as in the agent's container."""
    folder = tmp_path / "relative-test-sh"
    shutil.copytree(humaneval_task.path, folder)
    (folder / "tests" / "test.sh").write_text(
        '#!/bin/bash\nmkdir -p /logs/verifier\n'
        'if [ "$(pwd)" = /app ] && [ -f solution.py ] && grep -q def solution.py; then r=1; else r=0; fi\n'
        'echo "$r" > /logs/verifier/reward.txt\n'
    )
    task = load_task(folder)

    async def oracle(verification: str):
        async with SandboxManager(SandboxConfig(concurrency=1, verification=verification)) as mgr:
            return await mgr.run_oracle(task)

    for mode in ("clean_room", "same_container"):
        trial = run(oracle(mode))
        assert (trial.verification, trial.reward) == (mode, 1.0), (mode, trial.outcome, trial.detail)
        assert "getcwd" not in (trial.detail or ""), trial.detail


HARBOR13 = FIXTURES.parent / "harbor13"
# One fixture per schema 1.3 feature that runs without a listener (network-per-phase is in test_network).
RUNNABLE = ("separate-verifier-image", "separate-prebuilt-verifier", "network-allowlist", "healthcheck", "newer-schema")
PREBUILT = "swerl-fixture/prebuilt-verifier:1"


def _dataset_row(folder: Path) -> tuple[str, bytes]:
    """A TaskTrove-style row: the folder's relative path and a gzip'd tar of it (one top-level folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return f"harbor13/{folder.name}", buf.getvalue()


@pytest.fixture(scope="module")
def harbor13_dataset(tmp_path_factory, docker_client, humaneval_task):
    """A parquet dataset of the runnable schema 1.3 fixtures, the issue's HumanEval rewrite, and a
    copy of the healthcheck fixture whose check never passes; the prebuilt verifier image built."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("harbor13")
    docker_client.images.build(path=str(HARBOR13 / "separate-prebuilt-verifier" / "tests"), tag=PREBUILT, rm=True,
                               network_mode="none")
    he = shutil.copytree(humaneval_task.path, root / "humaneval-000-v13")
    rewrite_in_schema_13(he / "task.toml")
    unhealthy = shutil.copytree(HARBOR13 / "healthcheck", root / "healthcheck-never-ready")
    toml = unhealthy / "task.toml"
    toml.write_text(toml.read_text().replace('command = "test -d /app && test -w /app"', 'command = "test -e /never"'))
    paths, blobs = zip(*(_dataset_row(f) for f in [*(HARBOR13 / n for n in RUNNABLE), he, unhealthy]))
    pq.write_table(pa.table({"path": list(paths), "task_binary": list(blobs)}), root / "tasks.parquet")
    return load_tasks(root / "tasks.parquet", cache_dir=root / "cache")


def test_schema_13_tasks_from_a_dataset_row_score_oracle_one_null_zero_in_their_verifier_images(
        docker_client, harbor13_dataset):
    tasks = harbor13_dataset
    report = run(run_sandbox_test(list(tasks), SandboxConfig(concurrency=2, warm_pool_size=2)))
    trials = {(r.task, r.attempt): r for r in report.records}
    for name in (*RUNNABLE, "humaneval-000-v13"):
        oracle, null = trials[(name, "oracle")], trials[(name, "null")]
        assert (oracle.outcome, oracle.reward, null.outcome, null.reward) == (Outcome.passed, 1.0, Outcome.failed, 0.0), (
            name, oracle.detail, null.detail)
        assert oracle.verification == null.verification == "clean_room", name
    # The separate verifiers ran in their own images; the HumanEval rewrite in its task image.
    built = trials[("separate-verifier-image", "oracle")].verifier_image
    assert built.startswith("swerl-task:") and built != trials[("healthcheck", "oracle")].verifier_image
    assert trials[("separate-prebuilt-verifier", "null")].verifier_image == PREBUILT
    he_image = trials[("humaneval-000-v13", "oracle")].verifier_image
    assert he_image == run(_image_of(tasks.by_name("humaneval-000-v13")))
    # A healthcheck that never passes: an infrastructure outcome, masked, and the task flagged.
    for attempt in ("oracle", "null"):
        failed = trials[("healthcheck-never-ready", attempt)]
        assert (failed.outcome, failed.failure_class) == (Outcome.healthcheck_failed, "mask"), failed.detail
        assert "healthcheck] `test -e /never` failed 2 time(s) in a row (exit 1" in failed.detail, failed.detail
    assert [b.task for b in report.broken] == ["healthcheck-never-ready"]
    assert containers_of(docker_client, report.run_id) == []


async def _image_of(task) -> str:
    async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
        return await mgr.image_for(task)
