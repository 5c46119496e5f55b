"""After a misbehaving verifier nothing keeps running in the container, and after the trial
the container itself is gone, on every exit path."""

from __future__ import annotations

import asyncio

import pytest

from swerl.sandbox import Outcome, SandboxConfig, SandboxManager

from ._support import containers_of, fixture_task, run

pytestmark = pytest.mark.docker

# Processes other than PID 1's keeper loop, its `sleep`, and this probe's own wrapper.
PROCS = (
    "for s in /proc/[0-9]*/stat; do read -r p c st pp r < $s 2>/dev/null || continue; echo \"$p $c $st $pp\"; done"
)


def _leftovers(listing: str) -> list[str]:
    keep = ("(sh)", "(sleep)", "(timeout)", "(bash)")
    return [line for line in listing.splitlines() if line.split()[1] not in keep or line.split()[2] == "Z"]


@pytest.mark.parametrize(("task_name", "outcome"), [("loop_forever", Outcome.verifier_timeout), ("fork_bomb", Outcome.failed)])
def test_verifier_leaves_no_process_behind(docker_client, task_name, outcome):
    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False, pids_limit=64)) as mgr:
            async with mgr.sandbox(fixture_task(task_name)) as sb:
                verdict = await sb.verify()
                listing = await sb.exec(PROCS, timeout_s=10)
            return verdict, listing, mgr.run_id

    verdict, listing, run_id = run(body())
    assert verdict.outcome is outcome and verdict.reward == 0.0
    assert _leftovers(listing.output) == [], listing.output
    assert len(listing.output.splitlines()) <= 6
    if task_name == "fork_bomb":
        count = int(verdict.output_tail.split("processes:")[1].split()[0])
        assert 0 < count <= 64  # bounded by the pids limit
    assert containers_of(docker_client, run_id) == []


def test_exception_inside_a_trial_still_removes_its_container(docker_client):
    seen = {}

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
            seen["run"] = mgr.run_id
            async with mgr.sandbox(fixture_task("add")) as sb:
                seen["id"] = sb.container_id
                raise RuntimeError("agent crashed")

    with pytest.raises(RuntimeError, match="agent crashed"):
        run(body())
    assert containers_of(docker_client, seen["run"]) == []


def test_warm_pool_gives_a_fresh_container_per_trial_and_drains(docker_client):
    async def body():
        async with SandboxManager(SandboxConfig(concurrency=2, warm_pool=True)) as mgr:
            ids = []
            for _ in range(3):
                async with mgr.sandbox(fixture_task("add")) as sb:
                    marker = await sb.exec("test -e /tmp/used && echo reused; touch /tmp/used", timeout_s=10)
                    ids.append((sb.container_id, marker.output))
            return ids, mgr.run_id

    ids, run_id = run(body())
    assert len({cid for cid, _ in ids}) == 3
    assert all(out == "" for _, out in ids)
    assert containers_of(docker_client, run_id) == []


def test_container_killed_mid_trial_is_daemon_error_and_other_trials_continue(docker_client):
    from swerl.errors import SandboxError

    async def victim(mgr):
        async with mgr.sandbox(fixture_task("add")) as sb:
            docker_client.api.kill(sb.container_id)
            return await sb.verify()

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=2, warm_pool=False)) as mgr:
            return await asyncio.gather(victim(mgr), mgr.run_oracle(fixture_task("add")), return_exceptions=True), mgr.run_id

    (failed, other), run_id = run(body())
    assert isinstance(failed, SandboxError) and failed.outcome is Outcome.daemon_error
    assert other.outcome is Outcome.passed and other.reward == 1.0
    assert containers_of(docker_client, run_id) == []


def test_warm_pools_beyond_the_most_recent_few_are_drained(docker_client):
    from swerl.sandbox.manager import MAX_WARM_POOLS

    task = fixture_task("add")

    def with_memory(memory_mb):
        env = task.config.environment.model_copy(update={"memory_mb": memory_mb})
        return task.model_copy(update={"config": task.config.model_copy(update={"environment": env})})

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=True, warm_pool_size=1)) as mgr:
            for memory_mb in range(256, 256 + 32 * (MAX_WARM_POOLS + 2), 32):
                for _ in range(2):  # a spec seen twice gets a warm container
                    async with mgr.sandbox(with_memory(memory_mb)):
                        pass
            await asyncio.sleep(0.5)
            engine = mgr.engines[0]
            await asyncio.wait(set(engine._evictions), timeout=30) if engine._evictions else None
            await mgr.engines[0].opened.reaper.drain(30)
            idle = [c for c in containers_of(docker_client, mgr.run_id) if c.labels.get("swerl.task") == "(warm pool)"]
            return len(engine.pools), len(idle), mgr.run_id

    pools, idle, run_id = run(body())
    assert pools == MAX_WARM_POOLS
    assert idle <= MAX_WARM_POOLS  # at most one idle container per kept pool
    assert containers_of(docker_client, run_id) == []


def test_sandbox_config_verifier_timeout_overrides_task_toml(docker_client):
    async def body():
        config = SandboxConfig(concurrency=1, warm_pool=False, verifier_timeout_s=1.5)
        async with SandboxManager(config) as mgr:
            async with mgr.sandbox(fixture_task("loop_forever")) as sb:  # task.toml says 3 s
                return await sb.verify(), mgr.run_id

    verdict, run_id = run(body())
    assert verdict.outcome is Outcome.verifier_timeout and verdict.reward == 0.0
    assert "verifier timeout of 1.5 s" in verdict.detail
    assert containers_of(docker_client, run_id) == []
