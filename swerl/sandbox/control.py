"""Blame by a control run: the one rule that decides whether a failed trial is masked.

A masked episode leaves the RLOO baseline and carries no gradient, so for a failing attempt being
masked is as good as escaping its negative advantage; which exception fired says nothing about
whose fault a failure is (an attempt can end its shell, take the reward file's rights, fill its
disk or its pid table, break its copy-out). So after an attempt acted and no trustworthy reward
came back (``failure_class`` ``mask``: no or unreadable reward file, disk or pid limits, a dead
keeper, an unreadable work product, a crash inside the trial), swerl runs a control: the same
verification (same mode, same engine when it is healthy) in a fresh sandbox of the pristine image,
where nothing was done, so the work product is the task's null one.

- The control reads a reward (``passed`` or ``failed``): the task and the engine work, so the
  attempt caused the failure: class ``zero``, reward 0, ``blame: attempt``.
- The control fails too: the task or the engine is at fault: class ``mask``, ``blame:
  infrastructure``, and the task is flagged (a warning in the run's log; the record carries it).

Failures that happen before the attempt could act (the image does not build, the container does
not start) stay ``mask`` without a control; so do trials whose engine stopped answering a ping
(``EngineLost``), which is proof by itself. Controls run only on these failure paths.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from swerl.errors import SandboxError
from swerl.sandbox.types import Blame, FailureClass, Outcome, TrialRecord, TrialTimings

if TYPE_CHECKING:
    from swerl.tasks.task_folder import Task

log = logging.getLogger(__name__)


class SandboxSource(Protocol):
    """What a control run needs of the sandbox manager (``swerl.sandbox.manager.SandboxManager``,
    which runs the controls: named here so this module stays under it)."""

    def sandbox(self, task: Task, timings: TrialTimings | None = None, *,
                prefer: str | None = None) -> contextlib.AbstractAsyncContextManager:
        """A started sandbox of ``task``'s pristine image, on engine ``prefer`` when it can."""
_REWARDED = (Outcome.passed, Outcome.failed)


@dataclass(frozen=True)
class ControlResult:
    """What one control run showed.

    Attributes:
        blame: ``attempt`` when the control read a reward, else ``infrastructure``.
        detail: one clause saying what the control saw.
        seconds: wall-clock seconds of the control's own work (its sandbox's start and its
            verification; the wait for a free sandbox slot is not counted).
    """

    blame: Blame
    detail: str
    seconds: float

    @property
    def failure_class(self) -> FailureClass:
        """``zero`` when the attempt is to blame, ``mask`` when the infrastructure is."""
        return FailureClass.zero if self.blame is Blame.attempt else FailureClass.mask


def needs_control(record: TrialRecord) -> bool:
    """A trial whose attempt acted, read no trustworthy reward, and has no control yet."""
    return record.failure_class is FailureClass.mask and record.acted and record.blame is None


async def run_control(mgr: SandboxSource, task: Task, engine: str | None = None) -> ControlResult:
    """Verify a fresh, untouched sandbox of ``task`` (on ``engine`` when it is healthy and free).

    ``seconds`` counts the control's own work (image lookup, container start, verification), not
    the wait for a free sandbox slot. Never raises for a failing control (that is its answer);
    cancellation propagates.
    """
    timings = TrialTimings()
    began: float | None = None
    try:
        async with mgr.sandbox(task, timings, prefer=engine) as sb:
            began = time.monotonic()
            verdict = await sb.verify()
    except SandboxError as err:
        outcome = err.outcome or Outcome.daemon_error
        blame, detail = Blame.infrastructure, f"the control failed too ({outcome.value}: {err})"
    except Exception as err:  # noqa: BLE001 - a crash of the control is no proof against the attempt
        log.exception("%s: the control run crashed", task.name)
        blame, detail = Blame.infrastructure, f"the control crashed too ({type(err).__name__}: {err})"
    else:
        if verdict.outcome in _REWARDED:
            blame, detail = Blame.attempt, f"the control read reward {verdict.reward:g}, so the attempt caused it"
        else:
            blame, detail = Blame.infrastructure, f"the control failed too ({verdict.outcome.value}: {verdict.detail})"
    seconds = timings.build_s + timings.start_s + (time.monotonic() - began if began is not None else 0.0)
    if blame is Blame.infrastructure:
        log.warning("task %s flagged: a trial read no reward and %s", task.name, detail)
    return ControlResult(blame, detail, seconds)


def settle(record: TrialRecord, control: ControlResult) -> TrialRecord:
    """``record`` with the control's verdict: class, ``blame``, reward 0, its detail and seconds."""
    timings = record.timings.model_copy(update={"control_s": control.seconds})
    detail = "; ".join(x for x in (record.detail, control.detail) if x)
    return record.model_copy(update={"failure_class": control.failure_class, "reward": 0.0, "blame": control.blame,
                                     "detail": detail, "timings": timings})


async def with_control(mgr: SandboxSource, task: Task, record: TrialRecord) -> TrialRecord:
    """``record`` settled by a control run when it needs one (:func:`needs_control`), else as it is."""
    if not needs_control(record):
        return record
    return settle(record, await run_control(mgr, task, record.engine))


__all__ = ["ControlResult", "needs_control", "run_control", "settle", "with_control"]
