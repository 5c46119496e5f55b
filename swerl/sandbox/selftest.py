"""``swerl sandbox-test``: check that every task's verifier can be trusted.

For each task, two trials in fresh sandboxes: the oracle (``solution/solve.sh``) must get
reward 1 (``passed``) and the null attempt (nothing done) must get reward 0 (``failed``).
With a red team (the attempts of :data:`swerl.sandbox.redteam.CATALOGUE`, and the episode
attempts the CLI adds from the agent stage), every attempt too: a task whose verifier gives any
of them reward > 0 is FORGEABLE; a task where any of them ends masked is ESCAPABLE. Every trial
that read no trustworthy reward after its attempt acted is settled by a control run
(:mod:`swerl.sandbox.control`). All trials run concurrently under the manager's semaphore; one
broken trial never cancels the others, and any exception inside one trial becomes that trial's
typed outcome (``trial_error``). Trials lost because the Docker engine stopped answering are an
environment problem (exit 3), not broken tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from swerl.errors import EnvironmentProblem, SwerlError
from swerl.sandbox.control import with_control
from swerl.sandbox.manager import SandboxManager
from swerl.sandbox.redteam import PREFIX, RedTeamAttempt, is_escaped, is_forged, trains_zeroed
from swerl.sandbox.network import check_network
from swerl.sandbox.types import Outcome, SandboxConfig, TrialRecord

if TYPE_CHECKING:
    from swerl.tasks.task_folder import Task

log = logging.getLogger(__name__)
ATTEMPTS = ("oracle", "null")
REDTEAM = "redteam"  # the column of all red-team attempts in counts()
# Outcomes that mean the engine may be gone; sandbox-test then asks it whether it still answers.
_ENGINE_OUTCOMES = (Outcome.daemon_error, Outcome.start_error, Outcome.build_error)


class BrokenTask(BaseModel):
    """A task whose verifier misbehaved, and why (one line)."""

    task: str
    reason: str


class ForgeableTask(BaseModel):
    """A task whose verifier gave reward > 0 to red-team attempts, and their names."""

    task: str
    attempts: list[str] = Field(description="Catalogue names of the attempts that earned reward.")


class EscapableTask(BaseModel):
    """A task where red-team attempts got their failing trial masked, and their names."""

    task: str
    attempts: list[str] = Field(description="Catalogue names of the attempts whose trial ended masked.")


class SandboxTestReport(BaseModel):
    """Result of :func:`run_sandbox_test`."""

    run_id: str
    records: list[TrialRecord] = Field(description="One per trial, in task order (oracle, null, red-team attempts).")
    broken: list[BrokenTask] = Field(default_factory=list)
    forgeable: list[ForgeableTask] = Field(default_factory=list)
    escapable: list[EscapableTask] = Field(default_factory=list)
    attempts: list[str] = Field(default_factory=list, description="Names of the red-team attempts run, in order.")

    @property
    def ok(self) -> bool:
        """True when every task behaved (oracle reward 1, null reward 0, no red-team reward, no red-team mask)."""
        return not self.broken and not self.forgeable and not self.escapable

    def counts(self) -> dict[str, Counter[str]]:
        """``{attempt: Counter(outcome)}``; all red-team attempts share the ``redteam`` column."""
        table: dict[str, Counter[str]] = {attempt: Counter() for attempt in ATTEMPTS}
        for record in self.records:
            column = REDTEAM if record.attempt.startswith(PREFIX) else record.attempt
            table.setdefault(column, Counter())[record.outcome.value] += 1
        return table

    def tamper_counts(self) -> dict[str, tuple[int, int]]:
        """``{attempt column: (trials with tamper reasons, trials)}``, columns as in :meth:`counts`."""
        table: dict[str, tuple[int, int]] = {}
        for record in self.records:
            column = REDTEAM if record.attempt.startswith(PREFIX) else record.attempt
            flagged, total = table.get(column, (0, 0))
            table[column] = (flagged + bool(record.tamper), total + 1)
        return table

    def flagged_counts(self) -> Counter[str]:
        """``Counter(attempt name -> tasks where its trial had tamper reasons)``, every red-team attempt run present."""
        flagged = Counter({name: 0 for name in self.attempts})
        flagged.update(r.attempt.removeprefix(PREFIX) for r in self.records if r.attempt.startswith(PREFIX) and r.tamper)
        return flagged

    def forged_counts(self) -> Counter[str]:
        """``Counter(attempt name -> tasks it forged)``, every red-team attempt run present."""
        forged = Counter({name: 0 for name in self.attempts})
        forged.update(name for f in self.forgeable for name in f.attempts)
        return forged

    def escaped_counts(self) -> Counter[str]:
        """``Counter(attempt name -> tasks where it got masked)``, every red-team attempt run present."""
        escaped = Counter({name: 0 for name in self.attempts})
        escaped.update(name for e in self.escapable for name in e.attempts)
        return escaped


def judge(task: str, oracle: TrialRecord | None, null: TrialRecord | None) -> BrokenTask | None:
    """Why a task is broken (oracle must pass with reward 1, null must fail with reward 0), or None."""
    reasons = []
    if oracle is None:
        reasons.append("no solution/solve.sh (oracle cannot run)")
    elif oracle.outcome is not Outcome.passed:
        reasons.append(f"oracle {oracle.outcome.value} (reward {oracle.reward:g}): {oracle.detail}")
    if null is not None and (null.outcome is not Outcome.failed or null.reward != 0.0):
        reasons.append(f"null attempt {null.outcome.value} (reward {null.reward:g}): {null.detail}")
    return BrokenTask(task=task, reason="; ".join(reasons)) if reasons else None


def forgeable(task: str, records: Sequence[TrialRecord], zeroed: bool = False) -> ForgeableTask | None:
    """The red-team attempts among ``records`` that earned reward > 0 (``zeroed``: with no tamper
    reason, :func:`~swerl.sandbox.redteam.is_forged`), or None."""
    names = [r.attempt.removeprefix(PREFIX) for r in records if is_forged(r, zeroed)]
    return ForgeableTask(task=task, attempts=names) if names else None


def escapable(task: str, records: Sequence[TrialRecord]) -> EscapableTask | None:
    """The red-team attempts among ``records`` whose trial ended masked, or None."""
    names = [r.attempt.removeprefix(PREFIX) for r in records if is_escaped(r)]
    return EscapableTask(task=task, attempts=names) if names else None


async def _safe_trial(mgr: SandboxManager, task: Task, attempt: str, redteam: dict[str, RedTeamAttempt]) -> TrialRecord:
    """Run one trial and settle it by a control when it needs one; any exception inside it becomes
    its record (``trial_error`` for a crash, ``build_error`` for a task-level error) instead of
    cancelling the batch."""
    try:
        if attempt == "oracle":
            record = await mgr.run_oracle(task)
        elif attempt.startswith(PREFIX):
            record = await redteam[attempt.removeprefix(PREFIX)].run(mgr, task)
        else:
            record = await mgr.run_null(task)
    except SwerlError as err:  # e.g. TaskError: docker-compose environment
        outcome = Outcome.build_error
        return TrialRecord(task=task.name, attempt=attempt, outcome=outcome,
                           failure_class=outcome.failure_class, detail=str(err))
    except Exception as err:  # noqa: BLE001 - a crash inside one trial is that trial's outcome
        log.exception("%s/%s: the trial crashed", task.name, attempt)
        outcome = Outcome.trial_error
        record = TrialRecord(task=task.name, attempt=attempt, outcome=outcome, failure_class=outcome.failure_class,
                             detail=f"{type(err).__name__}: {err}", acted=True)
    return await with_control(mgr, task, record)


def trial_attempts(task: Task, redteam: Sequence[RedTeamAttempt] = ()) -> list[str]:
    """The attempts sandbox-test runs on ``task``: oracle (when it has one), null, red team."""
    names = [a for a in ATTEMPTS if a != "oracle" or task.solution_dir is not None]
    return names + [PREFIX + a.name for a in redteam]


async def _any_engine_answers(mgr: SandboxManager) -> bool:
    """Whether any engine of the fleet still answers a ping."""
    answers = await asyncio.gather(*(engine.answers() for engine in mgr.engines))
    return any(answers)


async def run_sandbox_test(
    tasks: Sequence[Task],
    config: SandboxConfig,
    on_trial: Callable[[TrialRecord], None] | None = None,
    *,
    redteam: Sequence[RedTeamAttempt] = (),
) -> SandboxTestReport:
    """Run the oracle, the null attempt and the ``redteam`` attempts on every task; judge each.

    Args:
        tasks: loaded tasks (names unique).
        config: sandbox settings (concurrency, network, warm pool).
        on_trial: called with each record as it finishes (for progress bars).
        redteam: the red-team attempts to run on every task (names unique), e.g.
            :data:`~swerl.sandbox.redteam.CATALOGUE`; empty for none.

    Raises:
        TaskError: (exit 2) a task asks for a network allowlist and ``config.allow_network`` is set.
        EnvironmentProblem: Docker is not reachable (exit 3), at the start or after trials
            failed with daemon/start/build errors (the engine stopped answering mid-run).
    """
    by_name = {a.name: a for a in redteam}
    check_network(tasks, config)
    async with SandboxManager(config) as mgr:
        jobs: dict[asyncio.Task[TrialRecord], tuple[str, str]] = {}
        for task in tasks:
            for attempt in trial_attempts(task, redteam):
                job = asyncio.create_task(_safe_trial(mgr, task, attempt, by_name), name=f"{task.name}/{attempt}")
                jobs[job] = (task.name, attempt)
        results: dict[tuple[str, str], TrialRecord] = {}
        try:
            for done in asyncio.as_completed(list(jobs)):
                record = await done
                results[(record.task, record.attempt)] = record
                if on_trial is not None:
                    on_trial(record)
        finally:
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)
        lost = [r for r in results.values() if r.outcome in _ENGINE_OUTCOMES]
        if lost and not await _any_engine_answers(mgr):
            raise EnvironmentProblem(
                f"every Docker engine stopped answering during sandbox-test ({len(lost)} of {len(results)} trials "
                f"ended in {', '.join(sorted({r.outcome.value for r in lost}))}); restart dockerd (or fix sandbox.engines) and run it again")
        run_id = mgr.run_id
    records = [results[key] for t in tasks for key in ((t.name, a) for a in trial_attempts(t, redteam)) if key in results]
    broken = [
        b for t in tasks
        if (b := judge(t.name, results.get((t.name, "oracle")), results.get((t.name, "null")))) is not None
    ]
    forged = [f for t in tasks if (f := forgeable(t.name, [r for r in records if r.task == t.name],
                                                   zeroed=trains_zeroed(t))) is not None]
    escaped = [e for t in tasks if (e := escapable(t.name, [r for r in records if r.task == t.name])) is not None]
    return SandboxTestReport(run_id=run_id, records=records, broken=broken, forgeable=forged, escapable=escaped,
                             attempts=[a.name for a in redteam])
