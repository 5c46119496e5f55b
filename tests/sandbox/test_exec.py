"""Exec in a real container: output, exit codes, in-container timeout kills, output caps, files."""

from __future__ import annotations

import pytest

from swerl.sandbox import SandboxConfig, SandboxManager

from ._support import containers_of, fixture_task, run

pytestmark = pytest.mark.docker

COUNT_PROCS = "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n"


async def _in_sandbox(body, **config):
    async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False, **config)) as mgr:
        async with mgr.sandbox(fixture_task("add")) as sb:
            return await body(sb), mgr.run_id


def test_exec_returns_output_and_exit_code(docker_client):
    async def body(sb):
        return await sb.exec("echo out; echo err >&2; exit 7", timeout_s=10)

    result, run_id = run(_in_sandbox(body))
    assert result.exit_code == 7 and not result.timed_out
    assert sorted(result.output.splitlines()) == ["err", "out"]  # two pipes: order may vary
    assert containers_of(docker_client, run_id) == []


def test_exec_timeout_kills_the_process_inside_the_container(docker_client):
    async def body(sb):
        timed = await sb.exec("sleep 300 & sleep 301; echo never", timeout_s=1.0)
        left = await sb.exec("ps -eo args | grep -c '^sleep 30[01]' || true", timeout_s=10)
        return timed, left

    (timed, left), _ = run(_in_sandbox(body))
    assert timed.timed_out and timed.exit_code is None
    assert "never" not in timed.output
    assert 1.0 <= timed.duration_s < 5.0
    assert left.output.strip() == "0"  # the foreground and the background sleep are both gone


def test_exec_caps_megabytes_of_invalid_utf8_and_counts_dropped_bytes(docker_client):
    async def body(sb):
        script = "import sys\nfor _ in range(3000): sys.stdout.buffer.write(b'\\xff\\xfe' * 512 + b'\\n')"
        await sb.write_file("/tmp/noise.py", script.encode())
        return await sb.exec("python3 /tmp/noise.py", timeout_s=30)

    result, _ = run(_in_sandbox(body, max_output_bytes=64 * 1024))
    assert result.exit_code == 0
    assert result.truncated_bytes == 3000 * 1025 - 64 * 1024
    assert "\ufffd" in result.output and "bytes truncated" in result.output
    assert len(result.output.encode()) < 4 * 64 * 1024


def test_files_round_trip_as_tar_streams(docker_client, tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("X = 1\n")
    (tmp_path / "run.sh").write_text("echo ran\n")

    async def body(sb):
        await sb.write_file("/app/deep/dir/data.bin", b"\x00\xff binary", mode=0o600)
        await sb.upload_dir(tmp_path, "/srv/up")
        data = await sb.read_file("/app/deep/dir/data.bin")
        listing = await sb.exec("stat -c '%a %n' /app/deep/dir/data.bin; cat /srv/up/pkg/mod.py; bash /srv/up/run.sh", timeout_s=10)
        return data, listing

    (data, listing), _ = run(_in_sandbox(body))
    assert data == b"\x00\xff binary"
    assert listing.output == "600 /app/deep/dir/data.bin\nX = 1\nran\n"


def test_container_is_isolated_and_limited(docker_client):
    async def body(sb):
        attrs = docker_client.api.inspect_container(sb.container_id)
        nets = await sb.exec("ls /sys/class/net", timeout_s=10)
        return attrs, nets

    (attrs, nets), run_id = run(_in_sandbox(body, pids_limit=128))
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and nets.output.split() == ["lo"]
    assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
    assert host["PidsLimit"] == 128
    assert host["Memory"] == 512 * 1024 * 1024 and host["MemorySwap"] == host["Memory"]
    assert host["NanoCpus"] == 1_000_000_000
    labels = attrs["Config"]["Labels"]
    assert labels["swerl.run"] == run_id and labels["swerl.task"] == "add" and labels["swerl.pid"].isdigit()


def test_trial_containers_run_under_the_configured_oci_runtime(docker_client):
    # Docker registers its containerd shim under this second name too; any name the engine
    # lists works the same way (crun, runsc where dockerd has them: --add-runtime).
    async def body(sb):
        return docker_client.api.inspect_container(sb.container_id)["HostConfig"]["Runtime"], await sb.exec("echo ok")

    (runtime, result), _ = run(_in_sandbox(body, runtime="io.containerd.runc.v2"))
    assert runtime == "io.containerd.runc.v2" and result.output == "ok\n"
    (runtime, _), _ = run(_in_sandbox(body))
    assert runtime == "runc"  # the engine's default


def test_a_runtime_the_engine_lacks_is_an_environment_problem_at_open(docker_client):
    from swerl.errors import EnvironmentProblem

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, runtime="no-such-runtime")):
            pass

    with pytest.raises(EnvironmentProblem, match=r"no OCI runtime 'no-such-runtime' \(it has: .*runc") as caught:
        run(body())
    assert caught.value.exit_code == 3 and "--add-runtime no-such-runtime=" in str(caught.value)


def test_exec_feeds_stdin_then_eof(docker_client):
    async def body(sb):
        return await sb.exec("cat | wc -c; cat | wc -c", timeout_s=10, stdin=b"x" * 100_000)

    result, _ = run(_in_sandbox(body))
    assert result.exit_code == 0 and result.output.split() == ["100000", "0"]


def test_verifier_works_in_an_image_without_tar(docker_client, tmp_path):
    from swerl.sandbox import Outcome
    from swerl.tasks import load_task

    from ._support import copy_task

    folder = copy_task("add", tmp_path)
    (folder / "environment" / "Dockerfile").write_text("FROM python:3.10-slim\nWORKDIR /app\nRUN rm -f /usr/bin/tar /bin/tar\n")

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
            task = load_task(folder)
            async with mgr.sandbox(task) as sb:
                await sb.upload_dir(task.solution_dir, "/solution")
                await sb.exec("bash /solution/solve.sh", timeout_s=10)
                verdict = await sb.verify()
            return verdict, await mgr.image_for(task)

    verdict, image = run(body())
    docker_client.images.remove(image)
    assert verdict.outcome is Outcome.passed and verdict.reward == 1.0


def test_exec_timeout_also_kills_a_grandchild_that_left_the_process_group(docker_client):
    async def body(sb):
        held = await sb.exec("setsid sleep 300 & echo started; sleep 100", timeout_s=1.0)
        left = await sb.exec("ps -eo args | grep -c '^sleep [13]00' || true", timeout_s=10)
        background = await sb.exec("sleep 200 & echo ok", timeout_s=5.0)  # no timeout: jobs may outlive
        still = await sb.exec("ps -eo args | grep -c '^sleep 200' || true", timeout_s=10)
        return held, left, background, still

    (held, left, background, still), _ = run(_in_sandbox(body))
    assert held.timed_out and held.output.startswith("started\n")
    assert left.output.strip() == "0"
    assert background.exit_code == 0 and still.output.strip() == "1"
