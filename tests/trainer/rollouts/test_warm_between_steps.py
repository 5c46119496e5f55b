"""Warm pools refill while the trainer updates: between two collections the rollout runner's
event loop runs in a background thread (``runner._Idle``), so the containers the plan asked for
are started while the trainer's thread is busy elsewhere; without it nothing starts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.tasks.load import load_task
from swerl.trainer.rollouts.runner import _Idle

pytestmark = pytest.mark.docker

TASK = Path(__file__).resolve().parents[2] / "fixtures" / "tasks" / "add-two"


def _idle_after(pool, seconds: float) -> int:
    """The pool's idle containers after the calling thread was busy for up to ``seconds`` (an update)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and pool.idle < pool.size:
        time.sleep(0.1)
    return pool.idle


def test_a_plan_fills_its_pool_during_the_update_only_while_the_loop_runs_in_the_background():
    loop = asyncio.new_event_loop()
    manager = loop.run_until_complete(SandboxManager(SandboxConfig(concurrency=3)).__aenter__())
    idle = _Idle(loop)
    try:
        kept = loop.run_until_complete(manager.plan([load_task(TASK)], 3))
        pool = next(iter(manager.engines[0].pools.values()))
        stalled = _idle_after(pool, 3.0)  # nobody runs the loop: the fills wait
        idle.start()
        filled = _idle_after(pool, 60.0)
        idle.stop()
    finally:
        idle.stop()
        loop.run_until_complete(manager.__aexit__(None, None, None))
        loop.close()
    assert (kept, stalled, filled) == (3, 0, 3)
