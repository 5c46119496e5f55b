"""``swerl sandbox-test``: check that every task's verifier can be trusted.

For each task, two trials in fresh sandboxes: the oracle (``solution/solve.sh``) must get
reward 1 (``passed``) and the null attempt (nothing done) must get reward 0 (``failed``).
All trials run concurrently under the manager's semaphore; one broken trial never cancels
the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from swerl.errors import SwerlError
from swerl.sandbox.manager import SandboxManager
from swerl.sandbox.models import Outcome, SandboxConfig, TrialRecord

if TYPE_CHECKING:
    from swerl.tasks.models import Task

log = logging.getLogger(__name__)
ATTEMPTS = ("oracle", "null")


class BrokenTask(BaseModel):
    """A task whose verifier misbehaved, and why (one line)."""

    task: str
    reason: str


class SandboxTestReport(BaseModel):
    """Result of :func:`run_sandbox_test`."""

    run_id: str
    records: list[TrialRecord] = Field(description="One per trial, in task order (oracle then null).")
    broken: list[BrokenTask] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every task behaved (oracle reward 1, null reward 0)."""
        return not self.broken

    def counts(self) -> dict[str, Counter[str]]:
        """``{attempt: Counter(outcome)}``."""
        table: dict[str, Counter[str]] = {attempt: Counter() for attempt in ATTEMPTS}
        for record in self.records:
            table.setdefault(record.attempt, Counter())[record.outcome.value] += 1
        return table


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


async def _safe_trial(mgr: SandboxManager, task: Task, attempt: str) -> TrialRecord:
    """Run one trial; a task-level error becomes a record instead of cancelling the batch."""
    try:
        if attempt == "oracle":
            return await mgr.run_oracle(task)
        return await mgr.run_null(task)
    except SwerlError as err:  # e.g. TaskError: docker-compose environment
        outcome = Outcome.build_error
        return TrialRecord(task=task.name, attempt=attempt, outcome=outcome,
                           failure_class=outcome.failure_class, detail=str(err))


async def run_sandbox_test(
    tasks: Sequence[Task],
    config: SandboxConfig,
    on_trial: Callable[[TrialRecord], None] | None = None,
) -> SandboxTestReport:
    """Run the oracle and the null attempt of every task; judge each task.

    Args:
        tasks: loaded tasks (names unique).
        config: sandbox settings (concurrency, network, warm pool).
        on_trial: called with each record as it finishes (for progress bars).

    Raises:
        EnvironmentProblem: Docker is not reachable (exit 3).
    """
    async with SandboxManager(config) as mgr:
        jobs: dict[asyncio.Task[TrialRecord], tuple[str, str]] = {}
        for task in tasks:
            for attempt in ATTEMPTS:
                if attempt == "oracle" and task.solution_dir is None:
                    continue
                job = asyncio.create_task(_safe_trial(mgr, task, attempt), name=f"{task.name}/{attempt}")
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
        run_id = mgr.run_id
    records = [results[key] for key in ((t.name, a) for t in tasks for a in ATTEMPTS) if key in results]
    broken = [
        b for t in tasks
        if (b := judge(t.name, results.get((t.name, "oracle")), results.get((t.name, "null")))) is not None
    ]
    return SandboxTestReport(run_id=run_id, records=records, broken=broken)
