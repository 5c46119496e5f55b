"""The two command transports behave alike: while the keeper runs one command, the next goes by
``docker exec`` with the same output, exit code, environment, working directory, stdin, timeout
kill and cancellation kill; plus the timeout rule they share."""

from __future__ import annotations

import asyncio
import time

import pytest

from swerl.sandbox import ExecResult, SandboxConfig, SandboxManager
from swerl.sandbox.runtime.channel import STREAM_GRACE_S, Command, killed_by_timeout

from ._support import fixture_task, run

# Prints the parent of the command's parent: 1 (the keeper, PID 1) or 0 (a docker exec).
PROBE = 'read -r _ _ _ gp _ < /proc/$PPID/stat; echo "via $gp"; echo "foo=$FOO pwd=$(pwd)"; cat; exit 3'
COUNT_SLEEPS = "ps -eo args | grep -c '^sleep 3[0-9][0-9]' || true"


def _probe(sb):
    return sb.exec(PROBE, timeout_s=10, env={"FOO": "bar"}, workdir="/tmp", stdin=b"hello\n")


async def _until_no_sleeps(sb, wait_s: float, count: str = COUNT_SLEEPS) -> str:
    """The count of ``count``'s sleeps once it reads 0, or when ``wait_s`` has passed (a kill is
    asynchronous: under load the processes of a command that timed out die a moment later)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = (await sb.exec(count, timeout_s=10)).output.strip()
        if left == "0" or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.2)


@pytest.mark.docker
def test_a_command_beside_a_busy_keeper_goes_by_docker_exec_and_behaves_the_same(docker_client):
    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
            async with mgr.sandbox(fixture_task("add")) as sb:
                by_keeper = await _probe(sb)
                blocker = asyncio.create_task(sb.exec("sleep 399", timeout_s=60))
                await asyncio.sleep(0.5)
                by_exec = await _probe(sb)
                timed = await sb.exec("sleep 300 & setsid sleep 301 & sleep 302; echo never", timeout_s=1.0)
                after_timeout = await _until_no_sleeps(sb, 5.0, COUNT_SLEEPS.replace("3[0-9][0-9]", "30[0-2]"))
                cancelled = asyncio.create_task(sb.exec("sleep 303", timeout_s=60))
                await asyncio.sleep(0.5)
                cancelled.cancel()
                blocker.cancel()
                await asyncio.gather(cancelled, blocker, return_exceptions=True)
                left = await _until_no_sleeps(sb, 5.0)
                return by_keeper, by_exec, timed, after_timeout, left

    by_keeper, by_exec, timed, after_timeout, left = run(body())
    assert by_keeper.output == "via 1\nfoo=bar pwd=/tmp\nhello\n" and by_keeper.exit_code == 3
    assert by_exec.output == "via 0\nfoo=bar pwd=/tmp\nhello\n" and by_exec.exit_code == 3
    assert timed.timed_out and timed.exit_code is None and "never" not in timed.output
    assert 1.0 <= timed.duration_s < 5.0 and after_timeout == "0"
    assert left == "0"  # the cancelled docker exec and the cancelled keeper command were killed by their tags


def _result(exit_code, duration_s, timed_out=False):
    return ExecResult(exit_code=exit_code, output="", timed_out=timed_out, duration_s=duration_s)


def test_the_timeout_rule_counts_a_kill_at_the_deadline_and_nothing_else():
    assert killed_by_timeout(_result(137, 2.0), 2.0) and killed_by_timeout(_result(124, 1.96), 2.0)
    assert not killed_by_timeout(_result(137, 0.5), 2.0)  # killed by something else, early
    assert not killed_by_timeout(_result(1, 5.0), 2.0)
    assert killed_by_timeout(_result(None, 9.0, timed_out=True), None)  # the wait ran out
    assert not killed_by_timeout(_result(137, 9.0), None)  # no in-container timeout to blame


def test_a_command_waits_its_timeout_plus_the_grace_unless_told_and_needs_one_of_them():
    assert Command(script="true", max_output_bytes=1, timeout_s=2.0).deadline_s == 2.0 + STREAM_GRACE_S
    assert Command(script="true", max_output_bytes=1, wait_s=7.0).deadline_s == 7.0
    with pytest.raises(ValueError, match="timeout_s or wait_s"):
        Command(script="true", max_output_bytes=1)
