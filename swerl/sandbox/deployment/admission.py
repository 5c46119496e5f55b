"""Admission of trials by disk: a trial is placed on an engine only while the engine's free disk
covers the disk budgets of the trials in flight there, its own included.

The disk watch (:mod:`~swerl.sandbox.deployment.limits`) stops each trial container at its
``[environment] storage_mb``, but a budget means nothing on an engine that cannot hold it: an
attempt filling its own budget on a nearly full engine would fill the engine, and what fails next
(another trial, or the control run that decides whose fault a failure is) would look like the
infrastructure's fault. So each trial reserves its ``storage_mb`` on its engine from admission
until every container of it is removed (``SandboxManager.sandbox`` awaits their removal).

A reservation's claim is what its trial may still write: its budget less what the disk watch last
charged its current container (that part is already gone from the free disk). A trial is admitted
when the engine's free disk (:func:`~swerl.sandbox.deployment.limits.free_disk`: the lower of its
free blocks and its free inodes at the file system's bytes per inode) less the claims in flight
covers its budget. Otherwise it waits, in order of arrival: while trials are in flight there (each
releases its claim as it ends), then at most ``SandboxConfig.admission_wait_s`` more; then it is
refused (``start_error``: the attempt never acted, so it is masked without a control), naming the
free MiB, the claims in flight and the MiB it needs.

An engine whose data root this host cannot read (a remote engine: ``tcp://``) cannot be measured
from here: it admits every trial, and a warning says so once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from swerl.errors import SandboxError
from swerl.sandbox.deployment.limits import MIB, FreeDisk
from swerl.sandbox.types import Outcome

log = logging.getLogger(__name__)
# Seconds between two measurements of the free disk while a trial waits (a release wakes it sooner).
POLL_S = 1.0
FreeDiskProbe = Callable[[], Awaitable[FreeDisk | None]]


class Reservation:
    """One trial's hold on its engine's disk.

    Attributes:
        task: the task's name (named in a refusal).
        budget_mb: its ``[environment] storage_mb``.
        used: bytes its current container holds as last charged (set once it has one; 0 before).
    """

    def __init__(self, task: str, budget_mb: int) -> None:
        self.task, self.budget_mb = task, budget_mb
        self.used: Callable[[], int] = lambda: 0

    @property
    def claim_mb(self) -> int:
        """MiB the trial may still write: its budget less what it holds (never negative)."""
        return max(self.budget_mb - self.used() // MIB, 0)


class DiskAdmission:
    """The disk reservations of one engine.

    Args:
        url: the engine's URL (named in a refusal and in the warning of an unmeasured engine).
        probe: the engine's free disk now (None: not measurable from this host).
        wait_s: most seconds a trial waits once no trial is in flight (``SandboxConfig.admission_wait_s``).
    """

    def __init__(self, url: str, probe: FreeDiskProbe, wait_s: float) -> None:
        self.url, self.probe, self.wait_s = url, probe, wait_s
        self.held: set[Reservation] = set()
        self._turn = asyncio.Lock()  # first come, first admitted: a large budget is never overtaken for ever
        self._released = asyncio.Event()
        self._warned = False

    @contextlib.asynccontextmanager
    async def reserve(self, task: str, budget_mb: int) -> AsyncIterator[Reservation]:
        """Hold ``budget_mb`` on this engine while the caller's trial runs (see the module docstring).

        Raises:
            SandboxError: (``start_error``) the engine's free disk did not cover the budget in time.
        """
        held = Reservation(task, budget_mb)
        async with self._turn:
            await self._admit(held)
            self.held.add(held)
        try:
            yield held
        finally:
            self.held.discard(held)
            self._released.set()
            self._released = asyncio.Event()

    def claims_mb(self) -> int:
        """MiB the trials in flight may still write."""
        return sum(r.claim_mb for r in self.held)

    async def _admit(self, held: Reservation) -> None:
        """Return once the free disk covers ``held``'s budget and the claims in flight; else wait."""
        deadline: float | None = None
        waited = False
        while True:
            free = await self.probe()
            if free is None:
                if not self._warned:
                    self._warned = True
                    log.warning("engine %s: its free disk cannot be measured from this host; trials are admitted "
                                "without disk reservations there", self.url)
                return
            claims = self.claims_mb()
            if free.mib - claims >= held.budget_mb:
                return
            now = time.monotonic()
            if deadline is None and not waited:
                waited = True
                log.info("%s waits for disk on engine %s: %d MiB free, %d MiB of it reserved by %d trial(s) in flight, "
                         "it needs %d MiB", held.task, self.url, free.mib, claims, len(self.held), held.budget_mb)
            if self.held:  # trials in flight release their claims as they end
                deadline = None
            elif deadline is None:
                deadline = now + self.wait_s
            elif now >= deadline:
                raise SandboxError(
                    f"{held.task}: engine {self.url} has {free.mib} MiB free on Docker's data root {free.root}"
                    f"{free.said} with no trial in flight, and this trial needs [environment] storage_mb = "
                    f"{held.budget_mb} MiB (waited {self.wait_s:g} s, SandboxConfig.admission_wait_s); "
                    "free disk on the engine or lower storage_mb",
                    outcome=Outcome.start_error)
            released = self._released
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), POLL_S if deadline is None else min(POLL_S, deadline - now))


__all__ = ["DiskAdmission", "FreeDiskProbe", "Reservation"]
