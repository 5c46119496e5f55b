"""Ramp control on a real engine: creates are paced by ``engines[].max_creates_per_s``, and the
engine's warm pool (``engines[].warm``) refills in the background between steps, so the next
step's first trials start on warm containers."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.sandbox.engine_config import EngineConfig
from swerl.sandbox.deployment.ramp import CreatePace
from swerl.sandbox.docker_api import LOCAL_ENGINE_URL

from ._support import containers_of, fixture_task, run

RATE_PER_S = 2.0
STEP = 4


def test_a_pace_spaces_turns_and_no_limit_never_waits():
    async def turns(rate: float | None) -> list[float]:
        pace, loop = CreatePace(rate), asyncio.get_running_loop()
        began = loop.time()

        async def one() -> float:
            await pace.turn()
            return loop.time() - began

        return sorted(await asyncio.gather(*(one() for _ in range(4))))

    paced = run(turns(20.0))
    assert all(at >= k * 0.05 - 0.002 for k, at in enumerate(paced)), paced  # turn k never before k / rate
    assert run(turns(None))[-1] < 0.05


def _created_s(client, container_id: str) -> float:
    stamp = client.api.inspect_container(container_id)["Created"]  # RFC 3339, nanoseconds
    return datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00").timestamp()


@pytest.mark.docker
def test_a_step_ramps_at_the_engine_rate_and_the_next_starts_on_warm_containers(docker_client):
    task = fixture_task("add")
    engine_config = EngineConfig(url=LOCAL_ENGINE_URL, slots=STEP, warm=2, max_creates_per_s=RATE_PER_S)
    config = SandboxConfig(concurrency=STEP, engines=[engine_config])

    async def step(mgr: SandboxManager) -> list[tuple[str, float]]:
        async def trial() -> tuple[str, float]:
            async with mgr.sandbox(task) as sb:
                assert (await sb.exec("echo ok", timeout_s=30)).output.strip() == "ok"
                return sb.container_id, _created_s(docker_client, sb.container_id)

        return await asyncio.gather(*(trial() for _ in range(STEP)))

    async def body() -> tuple[list, set[str], list, float, str]:
        async with SandboxManager(config) as mgr:
            first = await step(mgr)
            pool = next(iter(mgr.engines[0].pools.values()))
            for _ in range(300):  # between steps: the pool refills in the background
                if len(pool._ready) == 2:
                    break
                await asyncio.sleep(0.1)
            warm = {container_id for container_id, _ in pool._ready}
            second = await step(mgr)
            return first, warm, second, mgr.engines[0].pace.waited_s, mgr.run_id

    first, warm, second, waited_s, run_id = run(body())
    created = sorted(at for _, at in first)
    # four on-demand creates at 2/s span >= 1.5 s (an unpaced burst lands within a fraction of that)
    assert created[-1] - created[0] >= (STEP - 1) / RATE_PER_S - 0.5, created
    assert waited_s > 0
    assert len(warm) == 2 and warm <= {container_id for container_id, _ in second}
    assert not {c for c, _ in first} & {c for c, _ in second}  # one fresh container per trial
    assert containers_of(docker_client, run_id) == []


async def _filled(pool, timeout_s: float = 60.0) -> None:
    """Wait until ``pool`` holds its size of idle containers."""
    for _ in range(int(timeout_s * 10)):
        if pool.idle >= pool.size:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the pool holds {pool.idle} of {pool.size} after {timeout_s} s")


@pytest.mark.docker
def test_the_plan_sizes_each_pool_from_the_step_and_both_containers_of_a_clean_room_trial_come_warm(docker_client):
    """3 slots, the clean room (2 containers of one spec per trial): a plan of 2 episodes keeps 4
    idle, one of 10 keeps 6 (the slots cap it), one of 2 after it still 6; filled before the step, the step's 3 trials take
    all 6 containers warm, the verifier's included, still score as fresh ones (oracle 1, null 0),
    and the pool fills again for the next step."""
    from swerl.sandbox.types import TrialTimings

    task = fixture_task("add")
    config = SandboxConfig(concurrency=3, verification="clean_room")

    async def trial(mgr: SandboxManager, timings: TrialTimings, oracle: bool) -> tuple[str, float]:
        async with mgr.sandbox(task, timings) as sb:
            if oracle:
                assert (await sb.run_solution()).exit_code == 0
            return sb.container_id, (await sb.verify()).reward

    async def body():
        async with SandboxManager(config) as mgr:
            engine = mgr.engines[0]
            [(spec, per_trial)] = await mgr.container_specs(task, engine)
            sizes = [await mgr.plan([task], 2), await mgr.plan([task], 10), await mgr.plan([task], 2)]
            pool = engine.pools[spec]
            await _filled(pool)
            timings = [TrialTimings() for _ in range(3)]
            results = await asyncio.gather(*(trial(mgr, t, i == 0) for i, t in enumerate(timings)))
            await _filled(pool)
            return per_trial, sizes, timings, results, mgr.run_id

    per_trial, sizes, timings, results, run_id = run(body())
    assert per_trial == 2 and sizes == [4, 6, 6]  # a smaller plan later (an extra round) keeps the size
    assert [(t.warm_containers, t.cold_containers) for t in timings] == [(2, 0)] * 3
    assert [reward for _, reward in results] == [1.0, 0.0, 0.0]
    assert len({container_id for container_id, _ in results}) == 3
    assert containers_of(docker_client, run_id) == []


@pytest.mark.docker
def test_a_plan_that_names_its_trials_starts_no_container_they_do_not_take(docker_client):
    """A task with an image of its own (a generated task): a collection planned ahead and again
    when it starts, 3 trials, gets 3 warm containers in all, and none is started after the last
    take to be removed unused when the next step brings other images; the same plan without its
    trials (a dataset-wide plan) refills to its size after the takes."""
    from swerl.sandbox.types import TrialTimings

    task = fixture_task("add")

    async def step(mgr: SandboxManager, trials: int | None) -> tuple[list[TrialTimings], int, int]:
        sizes = [await mgr.plan([task], 3, trials), await mgr.plan([task], 3, trials)]  # ahead, then at the start
        pool = next(iter(mgr.engines[0].pools.values()))
        await _filled(pool)
        timings = [TrialTimings() for _ in range(3)]

        async def trial(t: TrialTimings) -> None:
            async with mgr.sandbox(task, t) as sb:
                await sb.exec("true", timeout_s=30)

        await asyncio.gather(*(trial(t) for t in timings))
        await asyncio.sleep(1.0)  # a refill would have started by now
        return timings, sizes[-1], pool.idle + len(pool._filling)

    async def body(trials: int | None):
        async with SandboxManager(SandboxConfig(concurrency=3)) as mgr:
            return (*await step(mgr, trials), mgr.run_id)

    timings, kept, after, run_id = run(body(3))
    assert kept == 3 and [(t.warm_containers, t.cold_containers) for t in timings] == [(1, 0)] * 3
    assert after == 0  # nothing started for trials nobody runs
    assert containers_of(docker_client, run_id) == []
    _, kept, after, standing_run = run(body(None))
    assert (kept, after) == (3, 3)
    assert containers_of(docker_client, standing_run) == []


@pytest.mark.docker
def test_a_fixed_warm_size_or_no_warm_pool_overrides_the_plan(docker_client):
    task = fixture_task("add")

    async def kept(config: SandboxConfig) -> tuple[int, str]:
        async with SandboxManager(config) as mgr:
            return await mgr.plan([task], 4), mgr.run_id

    fixed, run_id = run(kept(SandboxConfig(concurrency=4, warm_pool_size=1)))
    off, off_run = run(kept(SandboxConfig(concurrency=4, warm_pool=False)))
    assert (fixed, off) == (1, 0)
    assert containers_of(docker_client, run_id) == [] and containers_of(docker_client, off_run) == []


@pytest.mark.docker
def test_a_planned_fill_never_exceeds_the_engine_create_pace(docker_client):
    """6 containers planned on an engine limited to 4 creates a second: their create times span at
    least 5 / 4 s (less the calls' jitter), and no second holds more than 4 + 1 of them."""
    rate, count = 4.0, 6
    task = fixture_task("add")
    engine_config = EngineConfig(url=LOCAL_ENGINE_URL, slots=count, max_creates_per_s=rate)
    config = SandboxConfig(concurrency=count, engines=[engine_config])

    async def body() -> tuple[list[float], float, str]:
        async with SandboxManager(config) as mgr:
            assert await mgr.plan([task], count) == count
            pool = next(iter(mgr.engines[0].pools.values()))
            await _filled(pool)
            created = sorted(_created_s(docker_client, container_id) for container_id, _ in pool._ready)
            return created, mgr.engines[0].pace.waited_s, mgr.run_id

    created, waited_s, run_id = run(body())
    assert len(created) == count and waited_s > 0
    assert created[-1] - created[0] >= (count - 1) / rate - 0.3, created
    assert max(sum(1 for t in created if start <= t < start + 1.0) for start in created) <= rate + 1, created
    assert containers_of(docker_client, run_id) == []
