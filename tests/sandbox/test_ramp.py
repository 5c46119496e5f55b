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
