"""A trial under gVisor (``sandbox.runtime: runsc``): the engine creates it with runsc, its code
sees gVisor's kernel instead of the host's, the oracle scores 1 where gVisor implements Landlock and
gets no reward (never an unconfined one) where it does not, and the tamper scan still reads what
the agent changed. Skipped only when the engine has no runsc registered."""

from __future__ import annotations

import os

import pytest

from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.tasks import import_humaneval, load_task

from ._support import run

pytestmark = pytest.mark.docker


def test_a_trial_runs_under_gvisor(docker_client, tmp_path):
    if "runsc" not in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("the engine has no OCI runtime runsc: register it with `SWERL_RUNSC=1 bash sandboxes/ensure-docker.sh` "
                    "(or `make docker RUNSC=1`)")
    [folder] = import_humaneval(tmp_path / "he", limit=1)
    task = load_task(folder)

    async def trials():
        async with SandboxManager(SandboxConfig(runtime="runsc", concurrency=2, warm_pool=False)) as mgr:
            async with mgr.sandbox(task) as sb:
                runtime = docker_client.api.inspect_container(sb.container_id)["HostConfig"]["Runtime"]
                kernel = (await sb.exec("uname -r", timeout_s=30)).output.strip()
                await sb.exec("mkdir -p /tests && touch /tests/test.sh", timeout_s=30)
                verdict = await sb.verify()
            return runtime, kernel, verdict, await mgr.run_oracle(task)

    runtime, kernel, verdict, oracle = run(trials())
    assert runtime == "runsc" and kernel and kernel != os.uname().release, kernel
    if "Landlock is unavailable" in oracle.detail:  # gVisor without Landlock: the harness cannot confine
        # the solution (it could read the hidden tests), so it writes no reward rather than an unconfined one
        assert (oracle.outcome.value, oracle.reward, oracle.failure_class) == ("no_reward_file", 0.0, "mask")
    else:
        assert (oracle.outcome.value, oracle.reward, oracle.tamper) == ("passed", 1.0, [])
    assert verdict.reward == 0.0 and "tests: added /tests" in verdict.tamper
