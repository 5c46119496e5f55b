"""The report's figures, drawn with matplotlib (object API, Agg canvas: no display, no pyplot
global state): one function per panel, each taking the runs (arms) and returning a Figure, or
None when no run logged the panel's metrics.

Every arm keeps one colour across all panels (matplotlib's ``tab10`` cycle, in arm order); seed
replicas of an arm (``Run.arm``) share its colour and line style.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from swerl import metric_keys
from swerl.report.labels import TIMING_PARTS, label_of, outcome_color, title_of
from swerl.report.runs import Run
from swerl.report.trend import ema_band

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
"""matplotlib's ``tab10`` colours; arm i is drawn in COLORS[i % 10]."""
STACK_COLORS = ["#66c2a5", "#fc8d62", "#8da0cb", "#e78ac3", "#a6d854", "#ffd92f", "#e5c494", "#b3b3b3"]
"""ColorBrewer ``Set2``, for the parts of stacked bars (so they never read as arms)."""


@dataclass(frozen=True)
class Panel:
    """A grid of line plots, one subplot per metric key, every arm overlaid.

    Attributes: name: file stem of the PNG. title: figure title. keys: metric keys, one subplot
        each (keys no run logged are left out). prefix: also plot every key starting with it.
        hide_constant: leave out a key whose value never changes in any run (a counter that
        stayed 0: staleness of a synchronous run, TIS caps never hit); the report names it.
    """

    name: str
    title: str
    keys: tuple[str, ...] = ()
    prefix: str | None = None
    hide_constant: bool = True


LINE_PANELS = [
    Panel("pass_at_n", "pass@n of the training batch", (metric_keys.REWARD_AVG_PASS_AT_N,), hide_constant=False),
    Panel("eval", "Held-out evaluation", prefix="eval/", hide_constant=False),
    Panel("lengths", "Response length (generated tokens, every row)", (
        metric_keys.RESPONSE_LENGTH_MEAN, metric_keys.RESPONSE_LENGTH_MAX, metric_keys.RESPONSE_LENGTH_CLIP_FRACTION,
        metric_keys.RESPONSE_LENGTH_REWARD_POS_MEAN, metric_keys.RESPONSE_LENGTH_REWARD_ZERO_MEAN,
        metric_keys.RESPONSE_LENGTH_MASKED_MEAN)),
    Panel("tis", "Rollout correction (pi_old / mu: TIS, MIS, IcePop, rejection)", (
        metric_keys.TIS_IMP_RATIO_MEAN, metric_keys.TIS_RATIO_MEAN, metric_keys.TIS_IMP_RATIO_CAPPED_FRACTION,
        metric_keys.TIS_MASKED_FRACTION, metric_keys.TIS_MASKED_NEG_ADV_FRACTION, metric_keys.TIS_LOG_RATIO_ABS_MEAN,
        metric_keys.TIS_ROWS_WITHOUT_LOGPROBS)),
    Panel("ratio_parts", "The ratio pi_old / mu taken apart (nats): kept mass, mismatch at equal weights, staleness", (
        metric_keys.TIS_LOG_TRUNCATION_MASS, metric_keys.TIS_MISMATCH_LOG_RATIO_ABS_MEAN,
        metric_keys.INFERENCE_LOGPROB_DIFF_MEAN,
        *(f"{metric_keys.TIS_LOG_RATIO_ABS_MEAN_LAG_PREFIX}{lag}" for lag in ("1", "2", "3plus")))),
    Panel("kl", "KL to the reference policy", (
        metric_keys.POLICY_KL_REF_MEAN, metric_keys.LOSS_KL, metric_keys.LOSS_KL_SHARE)),
    Panel("staleness", "Rollout staleness (steps)", (
        metric_keys.ASYNC_STALENESS_MEAN, metric_keys.ASYNC_STALENESS_MAX)),
    Panel("update", "Policy update", (
        metric_keys.LOSS_POLICY, "grad_norm", metric_keys.POLICY_CLIP_FRACTION,
        metric_keys.UPDATE_SKIPPED_NONFINITE_STEPS, metric_keys.RESPONSE_LENGTH_OVERLONG_FILTERED_FRACTION)),
]


def color(i: int) -> str:
    """The colour of arm ``i``."""
    return COLORS[i % len(COLORS)]


def dashes(i: int) -> str:
    """The line style of arm ``i``: arms whose curves coincide (same samples) stay visible."""
    return ("-", "--", "-.", ":")[i % 4]


def _grid(n: int, width_in: float = 12.0, row_in: float = 3.0) -> tuple[Figure, list]:
    cols = 1 if n == 1 else 2 if n <= 4 else 3
    rows = -(-n // cols)
    fig = Figure(figsize=(width_in, row_in * rows + 0.8), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).flatten().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _legend(fig: Figure, runs: list[Run]) -> None:
    """One entry per arm (seed replicas share their arm's colour, style and entry)."""
    firsts = list({run.arm: run for run in runs}.values())
    handles = [Line2D([], [], color=color(r.arm), ls=dashes(r.arm), lw=2) for r in firsts]
    labels = [r.arm_label or r.label for r in firsts]
    widest = max(len(label) for label in labels)  # ~150 characters of 9 pt text fit across the figure
    ncols = max(1, min(len(firsts), 3, 150 // (widest + 8)))
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=9)


def sane_ylim(ax, values: list[float], key: str) -> None:  # noqa: ANN001 - matplotlib Axes
    """A y range that shows the data without magnifying noise: a bounded metric keeps its lower
    bound in view (0 for a fraction, a reward, a count or a norm), an unbounded one spans at
    least a tenth of its magnitude; tick labels never use an offset (no ``1e-7+9.99999e-1``)."""
    ax.ticklabel_format(axis="y", useOffset=False)
    if not values:
        return
    low, high = min(values), max(values)
    bounds = label_of(key).bounds
    if bounds is not None and math.isinf(bounds[1]):  # a count or a norm: from 0 (or below, if it went there)
        ax.set_ylim(min(bounds[0], low), high * 1.1 if high > 0 else 1.0)
        return
    if bounds is not None:
        top = min(bounds[1], high + 0.1 * (bounds[1] - bounds[0])) if high < bounds[1] else bounds[1]
        ax.set_ylim(min(bounds[0], low), max(top, low + 0.1 * (bounds[1] - bounds[0])))
        return
    floor = 0.1 * max(abs(low), abs(high)) or 1.0
    if high - low < floor:
        mid = (high + low) / 2
        ax.set_ylim(mid - floor / 2, mid + floor / 2)


def _int_steps(ax, steps: list[int]) -> None:  # noqa: ANN001
    """Integer step ticks: every step when they are few, else integer-only ticks."""
    if 0 < len(steps) <= 12:
        ax.set_xticks(sorted(set(steps)))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def reward_figure(runs: list[Run], span: int = 5) -> Figure | None:
    """``reward/avg_raw_reward`` per step (thin, with its 95% binomial band from
    ``reward/num_trajectories``), its trailing EMA (thick, with its 95% band, see
    :mod:`swerl.report.trend`), the first step as a baseline (dashed) and the selected
    checkpoint (star on the EMA, dotted vertical line) of every arm."""
    series = [(run.arm, run, *run.steps(metric_keys.REWARD_AVG_RAW_REWARD)) for run in runs]
    if not any(steps for _, _, steps, _ in series):
        return None
    fig, (ax,) = _grid(1, row_in=4.5)
    every_step: list[int] = []
    shown: list[float] = []
    counts_seen: set[int] = set()
    for i, run, steps, values in series:
        if not steps:
            continue
        counts = dict(zip(*run.steps(metric_keys.REWARD_NUM_TRAJECTORIES)))
        n = [counts.get(s, 1.0) for s in steps]
        counts_seen.update(int(c) for c in n)
        band = ema_band(values, n, span)
        ax.fill_between(steps, [max(0.0, v - h) for v, h in zip(values, band.step_half)],
                        [min(1.0, v + h) for v, h in zip(values, band.step_half)], color=color(i), alpha=0.08, lw=0)
        ax.plot(steps, values, color=color(i), lw=1, alpha=0.45, marker=".")
        ax.fill_between(steps, [max(0.0, e - h) for e, h in zip(band.ema, band.ema_half)],
                        [min(1.0, e + h) for e, h in zip(band.ema, band.ema_half)], color=color(i), alpha=0.2, lw=0)
        ax.plot(steps, band.ema, color=color(i), ls=dashes(i), lw=2.5)
        ax.axhline(values[0], color=color(i), ls="--", lw=0.8, alpha=0.6)
        chosen = run.selection.chosen if run.selection else None
        if chosen is not None:
            ax.axvline(chosen.step, color=color(i), ls=":", lw=1.5)
            ax.plot([chosen.step], [chosen.ema], marker="*", ms=16, color=color(i), mec="black")
        every_step += steps
        shown += values + [e + h for e, h in zip(band.ema, band.ema_half)]
    ax.set_xlabel("global step")
    _int_steps(ax, every_step)
    ax.set_ylabel("mean reward of the batch")
    sane_ylim(ax, shown, metric_keys.REWARD_AVG_RAW_REWARD)
    ax.grid(alpha=0.3)
    n_text = "/".join(map(str, sorted(counts_seen))) if counts_seen else "?"
    fig.suptitle(f"Reward: per step (thin, n = {n_text} episodes) and trailing EMA, span {span} (thick); "
                 "shaded: 95% noise band; dashed: step 1; star: selected checkpoint", fontsize=11)
    _legend(fig, runs)
    return fig


def constant_keys(runs: list[Run], keys: list[str]) -> dict[str, float]:
    """The ``keys`` whose value is one number at every step of every run (key -> that value)."""
    out = {}
    for key in keys:
        values = {round(v, 12) for run in runs for v in run.steps(key)[1]}
        if len(values) == 1:
            out[key] = values.pop()
    return out


def line_figure(runs: list[Run], panel: Panel, hidden: dict[str, float] | None = None) -> Figure | None:
    """One subplot per key of ``panel`` that some run logged; every arm one line. Keys that
    never change are left out when the panel hides constants, and recorded in ``hidden``."""
    logged = set().union(*(r.keys() for r in runs))
    keys = [k for k in panel.keys if k in logged]
    if panel.prefix:
        keys += sorted(k for k in logged if k.startswith(panel.prefix) and k not in keys)
    if panel.hide_constant:
        constant = constant_keys(runs, keys)
        if hidden is not None:
            hidden.update(constant)
        keys = [k for k in keys if k not in constant]
    if not keys:
        return None
    fig, axes = _grid(len(keys))
    for ax, key in zip(axes, keys):
        every_step: list[int] = []
        every_value: list[float] = []
        for run in runs:
            steps, values = run.steps(key)
            if steps:
                ax.plot(steps, values, color=color(run.arm), ls=dashes(run.arm), lw=1.8,
                        marker="." if len(steps) < 40 else None)
            every_step += steps
            every_value += values
        _int_steps(ax, every_step)
        sane_ylim(ax, every_value, key)
        ax.set_title(title_of(key), fontsize=10)
        ax.set_xlabel("global step", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(panel.title)
    _legend(fig, runs)
    return fig


def _bars(runs: list[Run], parts: list[tuple[str, str, str]], title: str, ylabel: str, values_of,  # noqa: ANN001
          overlay=None) -> Figure | None:  # noqa: ANN001
    """Per run one subplot of stacked bars per step. ``parts``: (name, legend label, colour);
    ``values_of(record, name)`` gives a part's height; ``overlay(ax, run)`` draws on top."""
    if not runs or not parts:
        return None
    fig, axes = _grid(len(runs), row_in=3.4)
    for ax, run in zip(axes, runs):
        steps = [r["global_step"] for r in run.records]
        bottom = [0.0] * len(steps)
        for name, label, colour in parts:
            values = [values_of(r, name) for r in run.records]
            ax.bar(steps, values, bottom=bottom, color=colour, label=label, width=0.8)
            bottom = [b + v for b, v in zip(bottom, values)]
        if overlay is not None:
            overlay(ax, run)
        _int_steps(ax, steps)
        ax.set_title(run.label, fontsize=10)
        ax.set_xlabel("global step", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    legend = {label: handle for ax in axes for handle, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncols=min(len(legend), 4), fontsize=9)
    fig.suptitle(title)
    return fig


def _number(record: dict, key: str) -> float:
    value = record.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def timing_parts(record: dict) -> list[tuple[str, float]]:
    """The trainer thread's phases of one step record (:data:`TIMING_PARTS`, then ``other``):
    (label, seconds) summing to ``timing/step_s``. A record without ``wait_for_rollouts_s``
    (older runs, all synchronous) counts ``timing/rollout_s`` as the wait."""
    record = dict(record)
    if metric_keys.TIMING_WAIT_FOR_ROLLOUTS_S not in record and metric_keys.TIMING_ROLLOUT_S in record:
        record[metric_keys.TIMING_WAIT_FOR_ROLLOUTS_S] = record[metric_keys.TIMING_ROLLOUT_S]
    parts = [(label, _number(record, key)) for key, label in TIMING_PARTS if key in record]
    total = _number(record, metric_keys.TIMING_STEP_S)
    return parts + [("other (advantages, logging)", max(0.0, total - sum(v for _, v in parts)))]


def timing_figure(runs: list[Run]) -> Figure | None:
    """Seconds per step, stacked by the trainer's phases (they partition ``timing/step_s``),
    one subplot per arm; a pipelined run's collection time (``timing/rollout_s``, another
    thread, overlapping the step) is drawn as black ticks."""
    runs = [r for r in runs if any(metric_keys.TIMING_STEP_S in rec for rec in r.records)]
    labels = list(dict.fromkeys(label for r in runs for rec in r.records for label, _ in timing_parts(rec)))
    parts = [(label, label, STACK_COLORS[j % len(STACK_COLORS)]) for j, label in enumerate(labels)]

    def height(record: dict, label: str) -> float:
        return dict(timing_parts(record)).get(label, 0.0)

    def overlay(ax, run: Run) -> None:  # noqa: ANN001
        pairs = [(r["global_step"], _number(r, metric_keys.TIMING_ROLLOUT_S)) for r in run.records
                 if metric_keys.TIMING_ROLLOUT_S in r and abs(_number(r, metric_keys.TIMING_ROLLOUT_S)
                                                   - _number(r, metric_keys.TIMING_WAIT_FOR_ROLLOUTS_S)) > 1e-6
                 and metric_keys.TIMING_WAIT_FOR_ROLLOUTS_S in r]
        if pairs:
            ax.plot(*zip(*pairs), ls="none", marker="_", ms=18, mew=2.5, color="black",
                    label="rollout collection (producer thread, overlaps the step)")

    return _bars(runs, parts, "Time per step by phase (the bars partition timing/step_s)", "seconds", height, overlay)


def outcome_figure(runs: list[Run]) -> Figure | None:
    """Episodes per step by outcome (``outcome/*`` counts), stacked, one subplot per arm;
    coloured by meaning: passed green, failed red, others orange/grey."""
    runs = [r for r in runs if any(k.startswith("outcome/") for k in r.keys())]
    names = sorted({k.removeprefix("outcome/") for r in runs for k in r.keys() if k.startswith("outcome/")},
                   key=lambda n: (n != "passed", n != "failed", n))
    others = [n for n in names if outcome_color(n, []) == "#7f7f7f"]
    parts = [(n, n, outcome_color(n, others)) for n in names]
    return _bars(runs, parts, "Episodes per step by outcome", "episodes",
                 lambda record, name: _number(record, f"outcome/{name}"))


def all_figures(runs: list[Run], span: int = 5) -> tuple[list[tuple[str, str, Figure]], dict[str, float]]:
    """Every panel that has data, in report order: (name, title, figure); and the metrics left
    out because they never changed (key -> their one value)."""
    hidden: dict[str, float] = {}
    out: list[tuple[str, str, Figure | None]] = [("reward", "Reward and its trailing EMA", reward_figure(runs, span))]
    out += [(p.name, p.title, line_figure(runs, p, hidden)) for p in LINE_PANELS]
    out += [("timing", "Time per step by phase", timing_figure(runs)),
            ("outcomes", "Episodes by outcome", outcome_figure(runs))]
    return [(name, title, fig) for name, title, fig in out if fig is not None], hidden
