"""``swerl tasks health RUN_DIR``: the task health ledger of a run (``trainer/tracking/task_health.py``),
an optional re-check of the flagged tasks' verifiers in sandboxes, and the patch file that
``data.exclude`` reads.

Stage: after the trainer; reads the run folder, runs sandboxes only for ``recheck``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from swerl.errors import ConfigError
from swerl.report.runs import read_config, read_records
from swerl.run_layout import METRICS_FILE, ROLLOUTS_DIR
from swerl.run_layout import HEALTH_PATCH_FILE as PATCH_FILE
from swerl.tasks.exclude import write_exclude_file
from swerl.text import counted
from swerl.trainer.tracking.task_health import FLAGS, HealthRules, TaskHealth, outcome_summary, read_ledger

COLUMNS = ["task", "attempts", "judged", "passed", "solve rate per epoch", "masked", "first solved", "last solved",
           "outcomes", "flags"]


@dataclass
class HealthReport:
    """The ledger of one run: rows flagged first, the thresholds, what was re-checked."""

    run_dir: Path
    last_step: int | None
    rules: HealthRules
    rows: list[TaskHealth]
    rechecked: list[str]

    def flagged(self) -> list[TaskHealth]:
        """The rows with at least one flag."""
        return [r for r in self.rows if r.flags]


def build_health(run_dir: Path, rules: HealthRules, *, recheck: bool = False, concurrency: int | None = None) -> HealthReport:
    """The ledger of ``run_dir`` over its committed steps, flags set by ``rules``; with ``recheck``,
    the flagged tasks' oracle and null attempts run again (:func:`recheck_verifiers`).

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
    rechecked = recheck_verifiers(run_dir, [r for r in rows if r.flags], concurrency) if recheck else []
    rows.sort(key=lambda r: (not r.flags, r.task))
    return HealthReport(run_dir, last_step, rules, rows, rechecked)


def recheck_verifiers(run_dir: Path, rows: list[TaskHealth], concurrency: int | None) -> list[str]:
    """Run each task's oracle (expects reward 1) and a null attempt (expects 0) in fresh sandboxes,
    as ``swerl sandbox-test`` does; a task that misbehaves gets ``verifier_suspect``.

    Returns: the names re-checked. Raises: ConfigError when the run's config names no task source.
    """
    if not rows:
        return []
    from swerl.sandbox import SandboxConfig
    from swerl.sandbox.selftest import run_sandbox_test
    from swerl.sandbox.signals import run_async
    from swerl.tasks import load_tasks

    source = (read_config(run_dir).get("data") or {}).get("tasks")
    if not source:
        raise ConfigError(f"--recheck: {run_dir / 'config.yaml'} names no data.tasks to load the tasks from")
    tasks = list(load_tasks(source, names=[r.task for r in rows], on_error="skip"))
    config = SandboxConfig(**({"concurrency": concurrency} if concurrency else {}))
    report = run_async(run_sandbox_test(tasks, config))
    by_name = {r.task: r for r in rows}
    for broken in report.broken:
        if broken.task in by_name:
            by_name[broken.task].flags["verifier_suspect"] = f"re-check: {broken.reason}"
    return [t.name for t in tasks]


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
