"""Per-task evaluation results of runs, and whether two evaluations pair task by task.

Stage: after the trainer; reads files only. An evaluation is the sample records
(``swerl.agent.records``) of ``RUN_DIR/eval/step_N.jsonl`` (held-out evaluation during training)
or of ``OUT/trajectories.jsonl`` (``swerl eval``).

Per task, from its judged samples (masked ones are not judgements of the model and are left
out, as in ``swerl eval``): pass@1 = c / n and unbiased pass@k = 1 - C(n-c, k) / C(n, k)
(Chen et al. 2021) with k = the samples per task, defined when n >= k.

Two evaluations *pair* when they hold the same (task, sample index) pairs and every pair was
sampled with the same seed: then a per-task difference between them is a difference of weights,
not of sampling luck, and paired tests apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swerl.agent.metrics import pass_at_k
from swerl.agent.records import read_sample_records
from swerl.errors import ConfigError
from swerl.report.arms import EVAL_FILE
from swerl.trainer.evaluation import EVAL_DIR

_STEP_FILE = re.compile(r"^step_(\d+)\.jsonl$")


@dataclass(frozen=True)
class TaskResult:
    """One task in one evaluation: ``judged`` samples (not masked), ``passed`` of them, ``masked``."""

    judged: int
    passed: int
    masked: int

    def pass_at(self, k: int) -> float | None:
        """Unbiased pass@k, None when fewer than k samples were judged."""
        return pass_at_k(self.judged, self.passed, k) if self.judged >= k else None


@dataclass
class EvalSet:
    """The sample records of one evaluation.

    Attributes: source: the run or eval folder. step: the training step (None for ``swerl eval``).
        records: every sample record, masked ones included.
    """

    source: Path
    step: int | None
    records: list[dict[str, Any]]

    @property
    def where(self) -> str:
        """The evaluation, as a person names it: ``RUN eval step N`` or the eval folder."""
        return f"{self.source} (eval step {self.step})" if self.step is not None else str(self.source)

    def seeds(self) -> dict[tuple[str, int], int | None]:
        """(task, sample index) -> sampling seed."""
        return {(r["task"], int(r["sample_index"])): r.get("seed") for r in self.records}

    def samples_per_task(self) -> int:
        """The most samples any task has (k of pass@k)."""
        counts: dict[str, int] = {}
        for r in self.records:
            counts[r["task"]] = counts.get(r["task"], 0) + 1
        return max(counts.values(), default=0)

    def results(self) -> dict[str, TaskResult]:
        """Per task: judged, passed and masked samples."""
        out: dict[str, list[int]] = {}
        for r in self.records:
            row = out.setdefault(r["task"], [0, 0, 0])
            if r.get("failure_class") == "mask":
                row[2] += 1
            else:
                row[0] += 1
                row[1] += int(_passed(r))
        return {task: TaskResult(*row) for task, row in sorted(out.items())}


def _passed(record: dict[str, Any]) -> bool:
    """A sample passed: its record says so (or, in records that predate ``passed``, outcome
    ``passed`` with reward 1)."""
    if "passed" in record:
        return bool(record["passed"])
    return record.get("outcome") == "passed" and float(record.get("reward", 0.0)) >= 1.0


def eval_steps(run_dir: Path) -> list[int]:
    """Steps with an evaluation file ``RUN_DIR/eval/step_N.jsonl``, ascending."""
    folder = run_dir / EVAL_DIR
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _STEP_FILE.match(p.name)))


def load_eval_set(path: Path, step: int | None) -> EvalSet:
    """The evaluation of a ``swerl eval`` folder, or of a run folder at ``step``.

    Raises: ConfigError naming the folder and the fix (no evaluation, an unknown step, a bad line).
    """
    if (path / EVAL_FILE).is_file():
        return EvalSet(path, None, read_sample_records(path / EVAL_FILE))
    steps = eval_steps(path)
    if not steps:
        raise ConfigError(f"{path}: no {EVAL_DIR}/step_N.jsonl: give the run held-out evaluation (the eval section "
                          "of its config), or evaluate an export with swerl eval --from-run and compare that folder")
    if step not in steps:
        raise ConfigError(f"{path}: no evaluation at step {step}; evaluated steps: {', '.join(map(str, steps))}")
    return EvalSet(path, step, read_sample_records(path / EVAL_DIR / f"step_{step}.jsonl"))


def _names(items: set[str], most: int = 3) -> str:
    shown = sorted(items)[:most]
    return ", ".join(shown) + (f" and {len(items) - most} more" if len(items) > most else "")


def pairing_problem(first: EvalSet, other: EvalSet) -> str | None:
    """Why ``other`` does not pair with ``first`` (tasks, samples per task or seeds differ, or
    samples without a seed), or None when they pair sample by sample."""
    a, b = first.seeds(), other.seeds()
    tasks_a, tasks_b = {t for t, _ in a}, {t for t, _ in b}
    if tasks_a != tasks_b:
        parts = [f"{len(tasks_b - tasks_a)} tasks the first lacks ({_names(tasks_b - tasks_a)})"] if tasks_b - tasks_a else []
        if tasks_a - tasks_b:
            parts.append(f"lacks {len(tasks_a - tasks_b)} of its tasks ({_names(tasks_a - tasks_b)})")
        return f"eval tasks differ: {other.where} has {' and '.join(parts)} of {first.where}"
    if first.samples_per_task() != other.samples_per_task() or set(a) != set(b):
        return (f"eval samples differ: {first.where} has {first.samples_per_task()} samples per task, "
                f"{other.where} {other.samples_per_task()} (or other sample indices)")
    unseeded = sorted(key for key in a if a[key] is None or b[key] is None)
    if unseeded:
        task, index = unseeded[0]
        return (f"eval seeds unknown: {len(unseeded)} samples (e.g. {task} #{index}) have no recorded seed, so "
                "nothing says they were sampled alike; evaluate with this swerl (eval.seed, swerl eval --seed)")
    differ = sorted(key for key in a if a[key] != b[key])
    if differ:
        task, index = differ[0]
        return (f"eval seeds differ on {len(differ)} of {len(a)} samples (e.g. {task} #{index}: {a[(task, index)]} in "
                f"{first.where}, {b[(task, index)]} in {other.where}): evaluate both with the same eval.seed / --seed")
    return None
