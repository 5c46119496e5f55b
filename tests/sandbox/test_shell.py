"""The persistent shell: state across commands, still-running reports, Ctrl-C, run() timeouts."""

from __future__ import annotations

import time

import pytest

from swerl.sandbox import SandboxConfig, SandboxManager

from ._support import fixture_task, run

pytestmark = pytest.mark.docker


async def _with_shell(body):
    async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
        async with mgr.sandbox(fixture_task("add")) as sb:
            shell = await sb.open_shell()
            return await body(sb, shell)


def test_commands_see_the_previous_cd_variables_and_files(docker_client):
    async def body(sb, shell):
        first = await shell.send_keys("cd /tmp && export GREETING=hi && echo made > f.txt\n", wait_s=5)
        second = await shell.send_keys("pwd; echo $GREETING; cat f.txt\n", wait_s=5)
        ran = await shell.run("echo $GREETING from $(pwd)", timeout_s=5)
        return first, second, ran, shell.still_running

    first, second, ran, still_running = run(_with_shell(body))
    assert first == ""
    assert second == "/tmp\nhi\nmade\n"
    assert ran.exit_code == 0 and ran.output == "hi from /tmp\n"
    assert still_running is False


def test_send_keys_returns_early_when_the_command_finishes(docker_client):
    async def body(sb, shell):
        began = time.monotonic()
        out = await shell.send_keys("echo quick\n", wait_s=60)
        return out, time.monotonic() - began

    out, elapsed = run(_with_shell(body))
    assert out == "quick\n"
    assert elapsed < 30  # did not sit out the 60 s wait (behaviour, with a wide margin for load)


def test_long_command_is_reported_running_and_ctrl_c_stops_it(docker_client):
    async def body(sb, shell):
        started = await shell.send_keys("echo begin; sleep 120; echo after\n", wait_s=1.0)
        running = shell.still_running
        interrupted = await shell.send_keys("C-c", wait_s=3.0)
        stopped = not shell.still_running
        after = await shell.run("echo alive; ps -eo args | grep -c '^sleep 120' || true", timeout_s=5)
        return started, running, interrupted, stopped, after

    started, running, interrupted, stopped, after = run(_with_shell(body))
    assert started == "begin\n" and running
    assert "after" not in interrupted and stopped
    assert after.output == "alive\n0\n"


def test_run_timeout_kills_the_command_and_the_shell_stays_usable(docker_client):
    async def body(sb, shell):
        await shell.run("cd /app", timeout_s=5)
        hung = await shell.run("trap '' INT; sleep 200", timeout_s=1.0)
        after = await shell.run("pwd; ps -eo args | grep -c '^sleep 200' || true", timeout_s=5)
        return hung, after

    hung, after = run(_with_shell(body))
    assert hung.timed_out and hung.exit_code is None
    assert after.exit_code == 0 and after.output == "/app\n0\n"


def test_run_reports_exit_status_and_multiline_commands(docker_client):
    async def body(sb, shell):
        multi = await shell.run("for i in 1 2 3; do\n  echo $i\ndone\nfalse", timeout_s=5)
        return multi

    multi = run(_with_shell(body))
    assert multi.exit_code == 1 and multi.output == "1\n2\n3\n"
