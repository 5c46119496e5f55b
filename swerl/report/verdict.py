""""Did it learn?": the few lines a person reads first, at the end of ``swerl train`` and at the
top of ``swerl report``.

Stage: after the trainer; reads one run directory (metrics, config, held-out evaluations).
- Training reward: the trailing EMA at the last step against step 1 (the baseline the run
  starts from), with the 95% band of that change from the per-step episode counts
  (:func:`swerl.report.trend.ema_change`); "rose" or "fell" only when the band excludes 0.
- Held-out: when the run evaluated before training (``eval.before_train``) and later, the
  latest evaluation against step 0, paired by seed and tested as ``swerl compare`` does
  (bootstrap CI over tasks and McNemar, :func:`swerl.report.compare.learning_of_run`).
- Groups with signal: per step, the groups whose rewards were not all equal (RLOO gives the
  others zero advantage: no gradient).
- The next commands to run on the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from swerl import metric_keys
from swerl.report.runs import Run
from swerl.report.trend import ema_change
from swerl.selection import DEFAULT_METRIC


@dataclass
class RunVerdict:
    """What the verdict says. headline: one line. lines: the evidence. next_commands: shell lines."""

    headline: str
    lines: list[str]
    next_commands: list[str]


def signal_groups(run: Run) -> list[tuple[int, int, int]]:
    """(step, groups with reward variance, groups) per step, from ``reward/num_trajectories``,
    ``advantage/zero_variance_groups`` and ``advantage/below_min_groups`` and the run's
    ``algorithm.n_samples_per_prompt``; [] when the run does not say. With dynamic sampling the
    step's own counts of the groups drawn: ``dynamic_sampling/groups_kept`` (those with signal)
    of ``groups_kept + groups_dropped`` (the trained rows hold only the kept ones, or flat
    groups when none had signal)."""
    n = ((run.config.get("algorithm") or {}).get("n_samples_per_prompt")) or 0
    out = []
    for record in run.records:
        if metric_keys.DYNAMIC_SAMPLING_GROUPS_KEPT in record:
            kept = int(record[metric_keys.DYNAMIC_SAMPLING_GROUPS_KEPT])
            drawn = kept + int(record.get(metric_keys.DYNAMIC_SAMPLING_GROUPS_DROPPED, 0.0))
            out.append((int(record["global_step"]), kept, drawn))
            continue
        rows = record.get(metric_keys.REWARD_NUM_TRAJECTORIES)
        if not n or rows is None or metric_keys.ADVANTAGE_ZERO_VARIANCE_GROUPS not in record:
            continue
        groups = int(round(rows / n))
        flat = int(record[metric_keys.ADVANTAGE_ZERO_VARIANCE_GROUPS]
                   + record.get(metric_keys.ADVANTAGE_BELOW_MIN_GROUPS, 0.0))
        out.append((int(record["global_step"]), max(0, groups - flat), groups))
    return out


def _training_line(run: Run, span: int) -> tuple[str, str]:
    """(headline, evidence line) of the training reward's change."""
    steps, values = run.steps(DEFAULT_METRIC)
    if not steps:
        return "No training step logged a reward yet", f"{DEFAULT_METRIC}: no record"
    counts = dict(zip(*run.steps(metric_keys.REWARD_NUM_TRAJECTORIES)))
    n = [counts.get(s, 1.0) for s in steps]
    change = ema_change(values, n, span)
    per_step = "/".join(sorted({f"{c:g}" for c in n}))
    evidence = (f"training reward: trailing EMA (span {span}) {change.last_ema:.3f} at step {steps[-1]} vs "
                f"{change.first:.3f} at step {steps[0]}: {change.diff:+.3f}, 95% band "
                f"[{change.diff - change.half:+.3f}, {change.diff + change.half:+.3f}] "
                f"({len(steps)} steps, {per_step} episodes each)")
    if len(steps) < 2:
        return "One step: too early to tell", evidence
    if change.resolved():
        word = "rose" if change.diff > 0 else "fell"
        return f"The training reward {word} beyond its sampling noise", evidence
    return ("No change beyond sampling noise yet: more steps or more episodes per step narrow the band "
            f"(now ±{change.half:.3f})"), evidence


def _signal_line(run: Run) -> str | None:
    per_step = signal_groups(run)
    if not per_step:
        return None
    shown = ", ".join(f"{s}: {k}/{g}" for s, k, g in per_step[-10:])
    with_signal, total = sum(k for _, k, _ in per_step), sum(g for _, _, g in per_step)
    share = f"{with_signal / total:.0%}" if total else "-"
    return (f"groups with signal (rewards not all equal, so a gradient): {with_signal} of {total} ({share}); "
            f"per step {shown}")


def next_commands(run_dir: Path, program: str = "swerl", held_out: Path | None = None) -> list[str]:
    """What to run next on ``run_dir``: the report, the episode viewer, the held-out eval of the
    selected export and of step 0 (4 samples per task: one leaves a paired comparison little
    power), and their paired comparison; ``program`` is how swerl is
    called (``.venv/bin/swerl`` where the venv is not activated); ``held_out``: the held-out task
    folder (``TASKS`` when None)."""
    tasks = held_out if held_out is not None else "TASKS"
    return [f"{program} report {run_dir} --out {run_dir / 'report.html'}",
            f"{program} view {run_dir} --out {run_dir / 'view.html'}",
            f"{program} eval {tasks} --from-run {run_dir} -k 4 --out {run_dir / 'eval-selected'}   # the selected export",
            f"{program} eval {tasks} --from-run {run_dir} --step 0 -k 4 --out {run_dir / 'eval-step0'}   # the model it started from",
            f"{program} compare {run_dir / 'eval-step0'} {run_dir / 'eval-selected'}   # did training help? (paired)"]


def held_out_tasks(run: Run) -> Path | None:
    """A held-out task folder for ``run``: its eval section's tasks, else a ``heldout-*`` sibling of
    ``data.tasks`` (a generated family's split, ``swerl tasks generate``); None when neither exists."""
    evaluation = (run.config.get("eval") or {}).get("tasks")
    if evaluation and Path(evaluation).is_dir():
        return Path(evaluation)
    tasks = (run.config.get("data") or {}).get("tasks")
    if not tasks or not Path(tasks).is_dir():
        return None
    siblings = sorted(p for p in Path(tasks).parent.glob("heldout-*") if p.is_dir() and p != Path(tasks))
    return siblings[0] if siblings else None


def run_verdict(run: Run, span: int = 5, program: str = "swerl") -> RunVerdict:
    """The verdict of one run (module docstring); ``program``: see :func:`next_commands`."""
    from swerl.report.compare import learning_of_run

    headline, training = _training_line(run, span)
    lines = [training]
    held_out = learning_of_run(run.run_dir)
    if held_out:
        lines += [f"held-out: {v.text}" for v in held_out]
        first = held_out[0]
        rose = first.diff.low > 0
        fell = first.diff.high < 0
        headline = (f"Held-out {first.metric} {'rose' if rose else 'fell' if fell else 'did not change resolvably'} "
                    f"from step 0 to step {first.b.rsplit('@', 1)[-1]}; {headline[0].lower()}{headline[1:]}")
    else:
        lines.append("held-out: no evaluation before and after training (add an eval section with before_train: "
                     "true for a baseline on tasks the run does not train on)")
    signal = _signal_line(run)
    if signal:
        lines.append(signal)
    return RunVerdict(headline, lines, next_commands(run.run_dir, program, held_out_tasks(run)))
