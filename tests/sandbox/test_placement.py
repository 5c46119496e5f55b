"""Placement by free slots, and the engine settings' validation (no Docker needed)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from swerl.sandbox import SandboxConfig
from swerl.sandbox.engine_config import EngineConfig
from swerl.sandbox.deployment.engine import Engine
from swerl.sandbox.deployment.fleet import Fleet


def _fleet(*slots: int) -> Fleet:
    config = SandboxConfig(concurrency=8, engines=[EngineConfig(url=f"unix:///e{i}.sock", slots=s) for i, s in enumerate(slots)])
    engines = [Engine(e, config, {}) for e in config.engines]
    for engine in engines:
        engine.healthy = True
    return Fleet(engines, probe_s=1.0)


def test_trials_go_to_the_engine_with_the_most_free_slots():
    fleet = _fleet(2, 3)

    async def place(n: int) -> tuple[list[str], list[int], bool]:
        order = []
        for _ in range(n):
            engine = await fleet.slot().__aenter__()
            order.append(engine.url[-8:-5])
        return order, [e.in_use for e in fleet.engines], fleet.pick() is None

    assert asyncio.run(place(5)) == (["/e1", "/e0", "/e1", "/e0", "/e1"], [2, 3], True)


def test_no_trial_goes_to_a_quarantined_engine_and_none_at_all_when_every_engine_is():
    from swerl.errors import SandboxError

    fleet = _fleet(1, 1)
    fleet.engines[0].quarantine("test")
    assert fleet.pick() is fleet.engines[1]
    fleet.engines[1].quarantine("test")

    async def place() -> None:
        async with fleet.slot():
            pass

    with pytest.raises(SandboxError, match="every Docker engine stopped answering") as err:
        asyncio.run(place())
    assert err.value.outcome.value == "daemon_error"


def test_engine_settings_are_checked_at_load_time():
    with pytest.raises(ValidationError, match="unix:///path/docker.sock or tcp://host:port"):
        EngineConfig(url="ssh://host")
    with pytest.raises(ValidationError, match="both set"):
        SandboxConfig(docker_base_url="unix:///a.sock", engines=[EngineConfig(url="unix:///b.sock")])
    with pytest.raises(ValidationError, match="twice"):
        SandboxConfig(engines=[EngineConfig(url="unix:///b.sock"), EngineConfig(url="unix:///b.sock")])
    assert [e.slots for e in SandboxConfig(engines=[{"url": "tcp://h:2375", "slots": 3}]).engines] == [3]
