"""Red-team attempts against a small engine: an engine whose free disk covers one trial's budget
but not a second beside an attempt that filled its own.

An attempt that fills its disk budget with many entries (so its container is slow to remove), then
ends its verification (a sparse file over the work-product cap: ``disk_limit``), is settled by a
control run. On an engine with room for one budget only, a control that started while the
attempt's containers were still being removed would meet a full disk and fail, and the attempt's
failure would be masked as the infrastructure's. :class:`SmallEngineAttempt` runs such an attempt,
and its control, on a manager of its own whose engines' free disk reads as small:
``max(attempt budget, task budget) + attempt budget / 2`` MiB less what the trials in flight there
hold (as the disk watch charged their containers), so room for the attempt or the control, not for
a control beside the filled budget. The reading follows that manager's trials only (other jobs of
the host do not move it). The attempt holds one of the caller's concurrency slots
(:meth:`SandboxManager.slot`) while its manager runs it, one small engine of a run at a time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from swerl.sandbox.control import with_control
from swerl.sandbox.deployment.limits import MIB
from swerl.sandbox.manager import SandboxManager
from swerl.sandbox import redteam_payloads as p
from swerl.sandbox.redteam import SOLUTION, Attempt, Kind, run_attempt

if TYPE_CHECKING:
    from swerl.sandbox.deployment.engine import Engine
    from swerl.sandbox.deployment.limits import FreeDisk
    from swerl.sandbox.types import TrialRecord
    from swerl.tasks.task_folder import Task

# One lock per caller's manager (a run): its small engines, one at a time.
_SMALL_ENGINES: weakref.WeakKeyDictionary[SandboxManager, asyncio.Lock] = weakref.WeakKeyDictionary()


class SmallEngineAttempt(BaseModel):
    """An :class:`~swerl.sandbox.redteam.Attempt` run, with its control, on a small engine."""

    attempt: Attempt = Field(description="What the agent does (its storage_mb is the budget it fills).")

    @property
    def name(self) -> str:
        return self.attempt.name

    @property
    def kind(self) -> Kind:
        return self.attempt.kind

    @property
    def description(self) -> str:
        return self.attempt.description

    async def run(self, mgr: SandboxManager, task: Task) -> TrialRecord:
        """One trial of the attempt on ``task`` and, when it needs one, its control, both on a
        small-engine manager built from ``mgr.config`` (its own run id, no warm pool)."""
        config = mgr.config.model_copy(update={"concurrency": 1, "warm_pool": False, "run_id": None})
        budget_mb = self.attempt.storage_mb or task.config.environment.storage_mb
        free_mb = max(budget_mb, task.config.environment.storage_mb) + budget_mb // 2
        async with _one_at_a_time(mgr), mgr.slot(), SandboxManager(config) as small:
            for engine in small.engines:
                engine.admission.probe = _shrunk(engine, free_mb)
            record = await run_attempt(small, task, self.attempt)
            return await with_control(small, task, record)


def _one_at_a_time(mgr: SandboxManager) -> asyncio.Lock:
    """The lock that lets one small engine of ``mgr``'s run live at a time (two would each see the
    other's fill taken from its free disk)."""
    return _SMALL_ENGINES.setdefault(mgr, asyncio.Lock())


def _shrunk(engine: Engine, free_mb: int):
    """A free-disk probe of ``engine`` that reads ``free_mb`` less what the trials in flight there
    hold (as the disk watch last charged their containers); None where the engine cannot be measured.
    It follows only this manager's trials: other jobs of the host do not move it."""

    async def probe() -> FreeDisk | None:
        free = await engine.free_disk()
        if free is None:
            return None
        held_mb = sum(r.used() for r in engine.admission.held) // MIB
        return dataclasses.replace(free, mib=free_mb - held_mb, said="")

    return probe


# 30,120 entries (30 folders 4 deep, 1,000 files of 12 KiB at the bottom of each): 352 MiB of blocks,
# 471 MiB where the file system has 16 KiB per inode (ext4's default; the watch charges the larger),
# so within its 512 MiB budget; the small engine's 1,280 MiB hold the 1,024 MiB of a control of a
# task swerl writes only once the attempt's reservation is gone (its containers removed).
ENGINE_CATALOGUE: tuple[SmallEngineAttempt, ...] = (
    SmallEngineAttempt(attempt=Attempt(
        name="slow-removal-disk-fill", kind="escape", storage_mb=512, files={SOLUTION: p.WRONG_ANSWERS_PY},
        description="on an engine with room for one budget, fills its own 512 MiB budget with 30,000 files (slow "
        "to remove), then ends its verification with a sparse file over the work-product cap",
        commands=["mkdir -p /root/.swerl-fill && for i in $(seq 30); do mkdir -p /root/.swerl-fill/$i/a/b/c && "
                  "cd /root/.swerl-fill/$i/a/b/c && for j in $(seq 1000); do printf '%12288s' '' > f$j; done; done "
                  "&& truncate -s 300G /app/.swerl-sparse"])),
)


__all__ = ["ENGINE_CATALOGUE", "SmallEngineAttempt"]
