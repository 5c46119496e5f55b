"""The task health ledger: per task over a run, how its training episodes went, and flags for the
tasks that are dead weight or broken.

Stage: ``trainer/`` (pure Python, no torch): ``swerl tasks health RUN_DIR`` builds it from the
sample records of ``RUN_DIR/rollouts/step_N.jsonl``, and ``data.quarantine`` keeps one during a
run to drop flagged tasks from later epochs.

Per task: attempts (episodes), judged samples (not masked), passed, masked, the solve rate per
epoch (passed / judged), outcome counts, the first and last step with a passing sample, and
one *group* per step it was trained in. Flags (thresholds in :class:`HealthRules`):

- ``saturated``: every judged sample passed in each of its last K groups: no reward variance,
  no gradient (RLOO-n gives A = 0), only cost;
- ``never_solved``: no sample passed in any of its (at least K) groups;
- ``infra_flaky``: more than ``infra_fraction`` of its attempts failed on the infrastructure
  (``blame: infrastructure`` when the record has it, else failure class ``mask``), the
  verifier's own faults aside;
- ``verifier_suspect``: more than ``verifier_fraction`` of its attempts ended in a verifier fault
  (no reward file, a bad reward) not blamed on the attempt, or its oracle fails a re-check
  (``swerl tasks health --recheck``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from swerl.errors import ConfigError
from swerl.run_layout import ROLLOUTS_DIR, step_file_name
from swerl.run_layout import STEP_FILE_RE as _STEP_FILE
VERIFIER_OUTCOMES = frozenset({"no_reward_file", "bad_reward"})
"""Outcomes where the verifier, not the sandbox or the agent, failed (``swerl.sandbox.types.Outcome``)."""
Flag = Literal["saturated", "never_solved", "infra_flaky", "verifier_suspect"]
FLAGS: tuple[Flag, ...] = ("saturated", "never_solved", "infra_flaky", "verifier_suspect")


class HealthRules(BaseModel):
    """Thresholds of the flags (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    last_groups: int = Field(2, ge=1, description="K: saturated = every sample passed in each of the last K groups; "
                             "never_solved needs at least K groups.")
    infra_fraction: float = Field(0.25, ge=0, le=1, description="infra_flaky above this fraction of attempts "
                                  "failed on the infrastructure.")
    verifier_fraction: float = Field(0.25, ge=0, le=1, description="verifier_suspect above this fraction of "
                                     "attempts ended in a verifier fault.")


class QuarantineConfig(HealthRules):
    """``data.quarantine``: at the end of every epoch, tasks the ledger flags (with these
    thresholds) leave the prompt order of later epochs; the run keeps its number of steps."""

    flags: list[Flag] = Field(default_factory=lambda: list(FLAGS), min_length=1,
                              description="Which flags drop a task.")


@dataclass
class TaskHealth:
    """One task's row of the ledger (see the module docstring)."""

    task: str
    attempts: int = 0
    judged: int = 0
    passed: int = 0
    masked: int = 0
    infra_failures: int = 0
    verifier_faults: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    epochs: dict[int, list[int]] = field(default_factory=dict)
    groups: list[list[int]] = field(default_factory=list)
    first_solved_step: int | None = None
    last_solved_step: int | None = None
    flags: dict[str, str] = field(default_factory=dict)

    def solve_rate_by_epoch(self) -> dict[int, float | None]:
        """Epoch -> passed / judged (None when every sample of the epoch was masked)."""
        return {e: (p / j if j else None) for e, (j, p) in sorted(self.epochs.items())}


def _infra_blamed(record: dict[str, Any]) -> bool:
    """A failure charged to the infrastructure: the record's ``blame`` when it has one, else its
    failure class ``mask``."""
    if "blame" in record:
        return record["blame"] == "infrastructure"
    return record.get("failure_class") == "mask"


class TaskLedger:
    """The ledger being built: :meth:`observe` each training step's sample records in step order."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskHealth] = {}

    def observe(self, step: int, epoch: int, records: list[dict[str, Any]]) -> None:
        """Add one step's sample records (``task``, ``passed``, ``failure_class``, ``outcome``, ``blame``)."""
        groups: dict[str, list[int]] = {}
        for r in records:
            row = self.tasks.setdefault(r["task"], TaskHealth(task=r["task"]))
            row.attempts += 1
            row.outcomes[r.get("outcome", "unknown")] = row.outcomes.get(r.get("outcome", "unknown"), 0) + 1
            verifier = r.get("outcome") in VERIFIER_OUTCOMES and _infra_blamed(r)
            row.verifier_faults += verifier
            row.infra_failures += _infra_blamed(r) and not verifier
            if r.get("failure_class") == "mask":
                row.masked += 1
                continue
            passed = bool(r.get("passed"))
            row.judged += 1
            row.passed += passed
            counts = row.epochs.setdefault(epoch, [0, 0])
            counts[0] += 1
            counts[1] += passed
            group = groups.setdefault(r["task"], [step, 0, 0])
            group[1] += 1
            group[2] += passed
            if passed:
                row.first_solved_step = step if row.first_solved_step is None else row.first_solved_step
                row.last_solved_step = step
        for task, group in groups.items():
            self.tasks[task].groups.append(group)

    def flag(self, rules: HealthRules) -> list[TaskHealth]:
        """Every task's row with its ``flags`` set by ``rules``, flagged tasks first, then by name."""
        for row in self.tasks.values():
            row.flags = _flags(row, rules)
        return sorted(self.tasks.values(), key=lambda r: (not r.flags, r.task))

    def state_dict(self) -> dict[str, Any]:
        """The ledger as JSON-ready data (a checkpoint holds it for ``data.quarantine``)."""
        return {name: {k: v for k, v in vars(row).items() if k != "flags"} for name, row in self.tasks.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (JSON turned epoch keys into strings)."""
        self.tasks = {name: TaskHealth(**{**row, "epochs": {int(e): c for e, c in row["epochs"].items()}})
                      for name, row in state.items()}


def _flags(row: TaskHealth, rules: HealthRules) -> dict[str, str]:
    """The flags of one task with a one-line reason each."""
    out: dict[str, str] = {}
    k = rules.last_groups
    last = row.groups[-k:]
    if len(row.groups) >= k and all(judged and passed == judged for _, judged, passed in last):
        steps = ", ".join(str(s) for s, _, _ in last)
        out["saturated"] = f"every sample passed in its last {k} groups (steps {steps})"
    if len(row.groups) >= k and row.judged and not row.passed:
        out["never_solved"] = f"0 of {row.judged} judged samples passed in {len(row.groups)} groups"
    if row.attempts and row.infra_failures / row.attempts > rules.infra_fraction:
        out["infra_flaky"] = f"{row.infra_failures} of {row.attempts} attempts failed on the infrastructure"
    if row.attempts and row.verifier_faults / row.attempts > rules.verifier_fraction:
        kinds = ", ".join(sorted(o for o in row.outcomes if o in VERIFIER_OUTCOMES))
        out["verifier_suspect"] = f"{row.verifier_faults} of {row.attempts} attempts ended in a verifier fault ({kinds})"
    return out


def rollout_steps(run_dir: Path) -> list[int]:
    """Steps with a ``RUN_DIR/rollouts/step_N.jsonl``, ascending."""
    folder = run_dir / ROLLOUTS_DIR
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _STEP_FILE.match(p.name)))


def read_ledger(run_dir: Path, last_step: int | None = None) -> TaskLedger:
    """The ledger of a run from its rollout records, steps up to ``last_step`` (the last committed
    step: a file of a step a kill left uncommitted is not counted).

    Raises: ConfigError naming the file and line of a line that is not JSON.
    """
    ledger = TaskLedger()
    for step in rollout_steps(run_dir):
        if last_step is not None and step > last_step:
            continue
        path = run_dir / ROLLOUTS_DIR / step_file_name(step)
        records = []
        for lineno, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if text.strip():
                try:
                    records.append(json.loads(text))
                except json.JSONDecodeError as err:
                    raise ConfigError(f"{path}:{lineno}: not a JSON line ({err.msg}); delete the file to leave the "
                                      "step out") from err
        epoch = int(records[0].get("epoch", 0)) if records else 0
        ledger.observe(step, epoch, records)
    return ledger


def outcome_summary(row: TaskHealth, most: int = 3) -> str:
    """``passed 6, failed 2`` (the most frequent outcomes)."""
    return ", ".join(f"{name} {count}" for name, count in Counter(row.outcomes).most_common(most))
