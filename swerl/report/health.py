"""``swerl tasks health RUN_DIR``: the task health ledger of a run (``swerl/task_health.py``) as
rows and a summary, and the patch file that ``data.exclude`` reads.

Stage: after the trainer; reads the run folder and runs nothing (the command's ``--recheck``
runs the flagged tasks' sandboxes itself, then marks them with :func:`mark_rechecked`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from swerl.errors import ConfigError
from swerl.report.runs import read_records
from swerl.run_layout import METRICS_FILE, ROLLOUTS_DIR
from swerl.run_layout import HEALTH_PATCH_FILE as PATCH_FILE
from swerl.tasks.exclude import write_exclude_file
from swerl.text import counted
from swerl.task_health import FLAGS, HealthRules, TaskHealth, outcome_summary, read_ledger

COLUMNS = ["task", "attempts", "judged", "passed", "solve rate per epoch", "masked", "first solved", "last solved",
           "outcomes", "flags"]


@dataclass
class HealthReport:
    """The ledger of one run: rows flagged first, the thresholds, what was re-checked."""

    run_dir: Path
    last_step: int | None
    rules: HealthRules
    rows: list[TaskHealth]
    rechecked: list[str] = field(default_factory=list)

    def flagged(self) -> list[TaskHealth]:
        """The rows with at least one flag."""
        return [r for r in self.rows if r.flags]


def build_health(run_dir: Path, rules: HealthRules) -> HealthReport:
    """The ledger of ``run_dir`` over its committed steps, flags set by ``rules``.

    Raises: ConfigError when the folder has no rollout records (a run of an older swerl, or none).
    """
    if not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir} does not exist: pass the RUN_DIR of a swerl train run")
    last_step = None
    if (run_dir / METRICS_FILE).is_file():
        last_step = max((r["global_step"] for r in read_records(run_dir)), default=0)
    ledger = read_ledger(run_dir, last_step)
    if not ledger.tasks:
        raise ConfigError(f"{run_dir}: no {ROLLOUTS_DIR}/step_N.jsonl of a committed step: the run trained no step, "
                          "or predates the task ledger")
    rows = ledger.flag(rules)
    rows.sort(key=lambda r: (not r.flags, r.task))
    return HealthReport(run_dir, last_step, rules, rows)


def mark_rechecked(report: HealthReport, rechecked: list[str], broken: dict[str, str]) -> None:
    """Record a re-check of ``report``'s flagged tasks: the task names re-run, and ``broken``
    (task -> reason) flagged ``verifier_suspect``."""
    report.rechecked = list(rechecked)
    for row in report.rows:
        if row.task in broken:
            row.flags["verifier_suspect"] = f"re-check: {broken[row.task]}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def health_rows(report: HealthReport, every_task: bool = False) -> tuple[list[str], list[list[str]]]:
    """The ledger as a text table (columns, rows): flagged tasks, or every task."""
    rows = []
    for r in report.rows if every_task else report.flagged():
        epochs = " ".join(f"e{e}:{_rate(v)}" for e, v in r.solve_rate_by_epoch().items())
        rows.append([r.task, str(r.attempts), str(r.judged), str(r.passed), epochs or "-", str(r.masked),
                     "-" if r.first_solved_step is None else str(r.first_solved_step),
                     "-" if r.last_solved_step is None else str(r.last_solved_step), outcome_summary(r),
                     "; ".join(f"{flag}: {why}" for flag, why in r.flags.items())])
    return COLUMNS, rows


def summary_line(report: HealthReport) -> str:
    """``12 tasks over steps 1-30: 2 flagged (saturated 1, never_solved 1)``."""
    counts: dict[str, int] = {}
    for row in report.flagged():
        for flag in row.flags:
            counts[flag] = counts.get(flag, 0) + 1
    which = ", ".join(f"{flag} {counts[flag]}" for flag in FLAGS if flag in counts)
    steps = f" over steps 1-{report.last_step}" if report.last_step else ""
    return f"{counted(len(report.rows), 'task')}{steps}: {len(report.flagged())} flagged" + (f" ({which})" if which else "")


def write_patch(report: HealthReport, path: Path | None = None) -> Path:
    """Write the patch file (flagged task -> reasons) that ``data.exclude`` reads; default
    ``RUN_DIR/task_health.exclude.yaml``."""
    path = path or report.run_dir / PATCH_FILE
    reasons = {r.task: "; ".join(f"{flag}: {why}" for flag, why in r.flags.items()) for r in report.flagged()}
    rules = ", ".join(f"{k}={v}" for k, v in report.rules.model_dump().items())
    header = (f"swerl tasks health {report.run_dir} ({rules}): {summary_line(report)}.\n"
              f"Train without them: swerl train CONFIG --set data.exclude={path}")
    return write_exclude_file(path, reasons, header)
