"""``swerl compare``: do two or more arms differ, on a pinned eval set and in training?

Stage: after the trainer; reads run folders only (no torch). The arms are the runs given, seed
replicas grouped (``report/arms.py``); the first arm is the reference.

Eval (the evaluation at one step, ``--step``; default the latest step every run evaluated):
- per task and arm, pass@1 and pass@k (k = samples per task) from the judged samples, averaged
  over the arm's replicas;
- per pair of arms, the per-task differences (B - A) and the percentile bootstrap CI of their
  mean over tasks (``report/stats.py``: B resamples, fixed seed);
- an exact McNemar test on per-task binary success. **A task counts as solved by an arm when its
  per-task metric, averaged over the arm's replicas, exceeds 1/2**: for pass@1 with one replica,
  more than half of its samples pass; for pass@k (k = all samples) with one replica, at least
  one sample passes. With one sample per task both are "the sample passed".
- Runs are compared only when they pair: same tasks, same samples per task, same seed for every
  (task, sample) (``report/evalsets.py``); else ``PairingError`` (exit 2) names the difference.
  ``unpaired=True`` compares them anyway as independent samples (tasks resampled per arm, and
  Fisher's exact test on solved counts in place of McNemar), marked ``unpaired``.
- When every run also evaluated step 0 (``eval.before_train``), each arm's change from its
  initial policy is tested the same way (paired by seed within the run).

Training: per arm, the trailing EMA (span 5) of ``reward/avg_raw_reward`` at the last step and the
step ``swerl select-checkpoint`` picks, with the mean and a Student-t CI across replicas.

A verdict says ``B > A`` only when the CI of the difference excludes 0 (``better at 95%`` when McNemar's
test agrees); else ``indistinguishable``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel

from swerl.errors import ConfigError
from swerl.report.arms import Arm, expand_run_dirs, group_arms, is_eval_folder
from swerl.report.evalsets import EvalSet, eval_steps, load_eval_set, pairing_problem
from swerl.report.runs import load_run, read_config
from swerl.report.stats import (
    DEFAULT_LEVEL, DEFAULT_RESAMPLES, DEFAULT_SEED, Interval, fisher_exact, mcnemar_exact, paired_bootstrap_ci,
    t_interval, unpaired_bootstrap_ci,
)
from swerl.selection import DEFAULT_METRIC, ema


UNIT = (0.0, 1.0)
"""The range of pass rates and of ``reward/avg_raw_reward`` (CIs across replicas are clipped to it)."""


class PairingError(ConfigError):
    """The runs' evaluations do not pair (tasks, samples or seeds differ); exit 2."""


class Estimate(BaseModel):
    """A mean with a two-sided CI (``n`` values behind it: tasks or replicas)."""

    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, interval: Interval, n: int) -> "Estimate":
        return cls(mean=interval.estimate, low=interval.low, high=interval.high, n=n)

    def text(self, digits: int = 3) -> str:
        """``0.250`` for one value, else ``0.250 [0.100, 0.400]``."""
        if self.n <= 1 or self.low == self.high == self.mean:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


class Verdict(BaseModel):
    """One metric compared between arm ``a`` (reference) and arm ``b``: ``diff`` = b - a."""

    metric: str
    a: str
    b: str
    diff: Estimate
    test: str
    p_value: float
    only_a: int | None = None
    only_b: int | None = None
    paired: bool
    text: str


class ArmSummary(BaseModel):
    """One arm: replicas, training (EMA, selection) and eval means across replicas."""

    arm: str
    run_dirs: list[str]
    steps: int | None = None
    final_ema: Estimate | None = None
    selected_steps: list[int | None] = []
    selected_ema: Estimate | None = None
    eval: dict[str, Estimate] = {}
    eval_before: dict[str, Estimate] = {}


class Comparison(BaseModel):
    """What ``swerl compare`` found (``--json`` writes it)."""

    step: int | None
    samples: int
    metrics: list[str]
    num_tasks: int
    paired: bool
    resamples: int
    bootstrap_seed: int
    level: float
    arms: list[ArmSummary]
    verdicts: list[Verdict]
    learning: list[Verdict] = []
    notes: list[str] = []


def _p_text(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"= {p:.3f}" if p < 0.1 else f"= {p:.2f}"


def verdict_text(v: Verdict, level: float) -> str:
    """The person-readable line: ``B > A: better at 95%: pass@1 +0.08 [0.02, 0.14], McNemar p = 0.010``
    (the CI excludes 0 and the test agrees), ``B > A: pass@1 +0.08 [0.01, 0.14], McNemar p = 0.09
    (not significant)`` (the CI alone), or
    ``B vs A: indistinguishable at 95%: pass@1 diff +0.01 [-0.05, 0.07], McNemar p = 0.62``."""
    tag = "" if v.paired else " (unpaired)"
    d = v.diff
    test = f"{v.test} p {_p_text(v.p_value)}"
    if d.low > 0 or d.high < 0:
        up = d.low > 0
        winner, loser = (v.b, v.a) if up else (v.a, v.b)
        mean, low, high = (d.mean, d.low, d.high) if up else (-d.mean, -d.high, -d.low)
        numbers = f"{v.metric} {mean:+.2f} [{low:.2f}, {high:.2f}], {test}"
        if v.p_value >= 1 - level:
            return f"{winner} > {loser}{tag}: {numbers} (not significant)"
        return f"{winner} > {loser}{tag}: better at {level:.0%}: {numbers}"
    return (f"{v.b} vs {v.a}{tag}: indistinguishable at {level:.0%}: {v.metric} diff {d.mean:+.2f} "
            f"[{d.low:.2f}, {d.high:.2f}], {test}")


def _arm_tables(arm_sets: list[list[EvalSet]], metric_k: dict[str, int]) -> list[dict[str, dict[str, float]]]:
    """Per arm: metric -> task -> value averaged over the arm's replicas that judged the task."""
    tables = []
    for sets in arm_sets:
        per_metric: dict[str, dict[str, float]] = {}
        for metric, k in metric_k.items():
            values: dict[str, list[float]] = {}
            for es in sets:
                for task, result in es.results().items():
                    value = result.pass_at(k)
                    if value is not None:
                        values.setdefault(task, []).append(value)
            per_metric[metric] = {task: float(np.mean(v)) for task, v in values.items()}
        tables.append(per_metric)
    return tables


def _compare_pair(name_a: str, name_b: str, metric: str, va: dict[str, float], vb: dict[str, float], paired: bool,
                  opts: dict) -> Verdict:
    """One verdict: paired differences over the tasks both arms scored, or two independent sets."""
    if paired:
        tasks = sorted(set(va) & set(vb))
        if not tasks:
            raise ConfigError(f"{name_a} and {name_b} scored no task in common for {metric} (every sample masked?)")
        a, b = np.array([va[t] for t in tasks]), np.array([vb[t] for t in tasks])
        interval = paired_bootstrap_ci(b - a, opts["resamples"], opts["seed"], opts["level"])
        test = mcnemar_exact(a > 0.5, b > 0.5)
        v = Verdict(metric=metric, a=name_a, b=name_b, diff=Estimate.of(interval, len(tasks)), test="McNemar",
                    p_value=test.p_value, only_a=test.only_a, only_b=test.only_b, paired=True, text="")
    else:
        a, b = np.array(list(va.values())), np.array(list(vb.values()))
        if a.size == 0 or b.size == 0:
            raise ConfigError(f"{name_a} or {name_b} scored no task for {metric} (every sample masked?)")
        interval = unpaired_bootstrap_ci(a, b, opts["resamples"], opts["seed"], opts["level"])
        v = Verdict(metric=metric, a=name_a, b=name_b, diff=Estimate.of(interval, min(a.size, b.size)),
                    test="Fisher", p_value=fisher_exact(a > 0.5, b > 0.5), paired=False, text="")
    v.text = verdict_text(v, opts["level"])
    return v


def _common_step(run_dirs: list[Path], step: int | None) -> int | None:
    """The eval step to compare: ``step``, else the latest step every run folder evaluated
    (None when every folder is a ``swerl eval`` output)."""
    runs = [d for d in run_dirs if not is_eval_folder(d)]
    if not runs or step is not None:
        return step
    common = set.intersection(*(set(eval_steps(d)) for d in runs))
    if not common:
        listed = "; ".join(f"{d}: {', '.join(map(str, eval_steps(d))) or 'none'}" for d in runs)
        raise ConfigError(f"no eval step that every run evaluated ({listed}); pass --step, or give the runs "
                          "held-out evaluation (eval section) at the same steps")
    return max(common)


def _check_pairs(sets: list[EvalSet], unpaired: bool, notes: list[str]) -> None:
    """Raise PairingError for the first evaluation that does not pair with the first one (unless
    ``unpaired``: then note it)."""
    for other in sets[1:]:
        problem = pairing_problem(sets[0], other)
        if problem is None:
            continue
        if not unpaired:
            raise PairingError(f"cannot pair the runs: {problem}; pass --unpaired to compare them anyway as "
                               "independent samples")
        notes.append(f"unpaired: {problem}")


def _training(arm: Arm, span: int) -> dict:
    """The arm's training summary: last step, final trailing EMA of the reward and the
    selected checkpoint per replica, with means and t-CIs across replicas ({} for eval folders)."""
    runs = [load_run(d, span) for d in arm.run_dirs if not is_eval_folder(d)]
    if not runs:
        return {}
    finals, selected, selected_ema = [], [], []
    for run in runs:
        _, rewards = run.steps(DEFAULT_METRIC)
        if rewards:
            finals.append(ema(rewards, span)[-1])
        chosen = run.selection.chosen if run.selection else None
        selected.append(chosen.step if chosen else None)
        if chosen is not None:
            selected_ema.append(chosen.ema)
    return {
        "steps": max((r.records[-1]["global_step"] for r in runs if r.records), default=0),
        "final_ema": Estimate.of(t_interval(finals, bounds=UNIT), len(finals)) if finals else None,
        "selected_steps": selected,
        "selected_ema": Estimate.of(t_interval(selected_ema, bounds=UNIT), len(selected_ema)) if selected_ema else None,
    }


def _eval_means(sets: list[EvalSet], metric_k: dict[str, int]) -> dict[str, Estimate]:
    """Per metric: the mean over tasks of each replica, then mean and t-CI across replicas."""
    out = {}
    for metric, k in metric_k.items():
        per_replica = []
        for es in sets:
            values = [v for r in es.results().values() if (v := r.pass_at(k)) is not None]
            if values:
                per_replica.append(float(np.mean(values)))
        if per_replica:
            out[metric] = Estimate.of(t_interval(per_replica, bounds=UNIT), len(per_replica))
    return out


def _learning(arms: list[Arm], arm_sets: list[list[EvalSet]], step: int | None, metric_k: dict[str, int],
              opts: dict) -> tuple[list[Verdict], list[list[EvalSet]]]:
    """Each arm's evaluation at ``step`` against its own step-0 evaluation (paired by seed within
    each run); nothing when some run has no step-0 evaluation, or they do not pair."""
    dirs = [d for arm in arms for d in arm.run_dirs]
    if step in (None, 0) or any(is_eval_folder(d) or 0 not in eval_steps(d) for d in dirs):
        return [], []
    before = [[load_eval_set(d, 0) for d in arm.run_dirs] for arm in arms]
    if any(pairing_problem(b, a) for bs, as_ in zip(before, arm_sets) for b, a in zip(bs, as_)):
        return [], before
    verdicts = []
    for arm, sets_before, sets_after in zip(arms, before, arm_sets):
        table_before, table_after = _arm_tables([sets_before, sets_after], metric_k)
        verdicts += [_compare_pair(f"{arm.name}@0", f"{arm.name}@{step}", metric, table_before[metric],
                                   table_after[metric], True, opts) for metric in metric_k]
    return verdicts, before


def learning_of_run(run_dir: Path, level: float = DEFAULT_LEVEL) -> list[Verdict]:
    """One run's latest held-out evaluation against its step-0 evaluation, per pass@k, tested
    as ``swerl compare`` tests an arm against its initial policy; [] when the run has no step-0
    evaluation and a later one, or they do not pair."""
    steps = [] if is_eval_folder(run_dir) else eval_steps(run_dir)
    if 0 not in steps or max(steps) == 0:
        return []
    arms = group_arms([run_dir], [read_config(run_dir)])
    after = [[load_eval_set(run_dir, max(steps))]]
    samples = after[0][0].samples_per_task()
    metric_k = {"pass@1": 1, **({f"pass@{samples}": samples} if samples > 1 else {})}
    opts = {"resamples": DEFAULT_RESAMPLES, "seed": DEFAULT_SEED, "level": level}
    return _learning(arms, after, max(steps), metric_k, opts)[0]


def compare_runs(paths: list[Path], *, step: int | None = None, unpaired: bool = False, all_pairs: bool = False,
                 resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED, level: float = DEFAULT_LEVEL,
                 span: int = 5) -> Comparison:
    """Compare the arms of ``paths`` (module docstring).

    Args:
        paths: run folders, arm folders of seed replicas, or ``swerl eval`` output folders.
        step: the eval step of the run folders (default: the latest every run evaluated).
        unpaired: compare evaluations that do not pair, as independent samples.
        all_pairs: every pair of arms (default: every arm against the first).
        resamples, seed, level: bootstrap resamples, its seed, the confidence level.
        span: EMA span of the training reward and the checkpoint selection.
    Returns: Comparison.
    Raises: ConfigError (fewer than two arms, no common eval step, bad files), PairingError.
    """
    run_dirs = expand_run_dirs(paths)
    arms = group_arms(run_dirs, [read_config(d) for d in run_dirs])
    if len(arms) < 2:
        raise ConfigError(f"swerl compare needs two arms, got one ({arms[0].name}: seed replicas of one config are "
                          "one arm); pass the run folders of another arm too")
    step = _common_step(run_dirs, step)
    arm_sets = [[load_eval_set(d, None if is_eval_folder(d) else step) for d in arm.run_dirs] for arm in arms]
    notes: list[str] = []
    _check_pairs([es for sets in arm_sets for es in sets], unpaired, notes)
    paired = not notes
    samples = arm_sets[0][0].samples_per_task()
    metric_k = {"pass@1": 1, **({f"pass@{samples}": samples} if samples > 1 else {})}
    opts = {"resamples": resamples, "seed": seed, "level": level}
    tables = _arm_tables(arm_sets, metric_k)
    pairs = [(i, j) for i in range(len(arms)) for j in range(i + 1, len(arms))] if all_pairs else [
        (0, j) for j in range(1, len(arms))]
    verdicts = [_compare_pair(arms[i].name, arms[j].name, metric, tables[i][metric], tables[j][metric], paired, opts)
                for i, j in pairs for metric in metric_k]
    learning, before = _learning(arms, arm_sets, step, metric_k, opts) if paired else ([], [])
    summaries = [ArmSummary(arm=arm.name, run_dirs=[str(d) for d in arm.run_dirs], **_training(arm, span),
                            eval=_eval_means(sets, metric_k), eval_before=_eval_means(before[i], metric_k) if before else {})
                 for i, (arm, sets) in enumerate(zip(arms, arm_sets))]
    return Comparison(step=step, samples=samples, metrics=list(metric_k), num_tasks=len(arm_sets[0][0].results()),
                      paired=paired, resamples=resamples, bootstrap_seed=seed, level=level, arms=summaries,
                      verdicts=verdicts, learning=learning, notes=notes)


def header(cmp: Comparison) -> str:
    """What was compared and how, in one line."""
    where = f"eval at step {cmp.step}" if cmp.step is not None else "swerl eval outputs"
    how = "paired by (task, sample) seeds" if cmp.paired else "UNPAIRED (independent samples)"
    return (f"{where}: {cmp.num_tasks} tasks x {cmp.samples} samples, {how}; CIs {cmp.level:.0%}: bootstrap over "
            f"tasks, B = {cmp.resamples} (seed {cmp.bootstrap_seed}); across replicas: Student t; a task is solved "
            "when its metric (replica mean) > 1/2")


def arm_rows(cmp: Comparison) -> tuple[list[str], list[list[str]]]:
    """The arms table (columns, rows of text): replicas, training EMA and selection, eval means."""
    step = "" if cmp.step is None else f" @{cmp.step}"
    columns = ["arm", "replicas", "steps", "final EMA reward", "selected step", "EMA at selected"]
    columns += [f"{m}{step}" for m in cmp.metrics]
    with_before = any(a.eval_before for a in cmp.arms)
    columns += [f"{m} @0" for m in cmp.metrics] if with_before else []
    rows = []
    for a in cmp.arms:
        row = [a.arm, str(len(a.run_dirs)), "-" if a.steps is None else str(a.steps),
               a.final_ema.text() if a.final_ema else "-",
               ", ".join("-" if s is None else str(s) for s in a.selected_steps) or "-",
               a.selected_ema.text() if a.selected_ema else "-"]
        row += [a.eval[m].text() if m in a.eval else "-" for m in cmp.metrics]
        row += [a.eval_before[m].text() if m in a.eval_before else "-" for m in cmp.metrics] if with_before else []
        rows.append(row)
    return columns, rows
