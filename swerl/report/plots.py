"""The report's figures, drawn with matplotlib (object API, Agg canvas: no display, no pyplot
global state): one function per panel, each taking the runs (arms) and returning a Figure, or
None when no run logged the panel's metrics.

Every arm keeps one colour across all panels (matplotlib's ``tab10`` cycle, in arm order); seed
replicas of an arm (``Run.arm``) share its colour and line style.
"""

from __future__ import annotations

from dataclasses import dataclass

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from swerl.report.runs import Run
from swerl.selection import ema

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
"""matplotlib's ``tab10`` colours; arm i is drawn in COLORS[i % 10]."""
STACK_COLORS = ["#66c2a5", "#fc8d62", "#8da0cb", "#e78ac3", "#a6d854", "#ffd92f", "#e5c494", "#b3b3b3"]
"""ColorBrewer ``Set2``, for the parts of stacked bars (so they never read as arms)."""


@dataclass(frozen=True)
class Panel:
    """A grid of line plots, one subplot per metric key, every arm overlaid.

    Attributes: name: file stem of the PNG. title: figure title. keys: metric keys, one subplot
        each (keys no run logged are left out). prefix: also plot every key starting with it.
    """

    name: str
    title: str
    keys: tuple[str, ...] = ()
    prefix: str | None = None


LINE_PANELS = [
    Panel("pass_at_n", "pass@n of the training batch", ("reward/avg_pass_at_n",)),
    Panel("eval", "Held-out evaluation", prefix="eval/"),
    Panel("lengths", "Response length (generated tokens, every row)", (
        "response_length/mean", "response_length/max", "response_length/clip_fraction",
        "response_length/reward_pos_mean", "response_length/reward_zero_mean", "response_length/masked_mean")),
    Panel("tis", "Truncated importance sampling", (
        "tis/imp_ratio_mean", "tis/imp_ratio_capped_fraction", "tis/log_ratio_abs_mean", "tis/rows_without_logprobs")),
    Panel("staleness", "Rollout staleness (steps)", ("async/staleness_mean", "async/staleness_max")),
    Panel("update", "Policy update", ("loss/policy", "grad_norm", "policy/clip_fraction",
                                      "update/skipped_nonfinite_steps")),
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


def reward_figure(runs: list[Run], span: int = 5) -> Figure | None:
    """``reward/avg_raw_reward`` per step (thin), its trailing EMA (thick) and the selected
    checkpoint (star on the EMA, dotted vertical line) of every arm."""
    series = [(run.arm, run, *run.steps("reward/avg_raw_reward")) for run in runs]
    if not any(steps for _, _, steps, _ in series):
        return None
    fig, (ax,) = _grid(1, row_in=4.5)
    for i, run, steps, values in series:
        if not steps:
            continue
        ax.plot(steps, values, color=color(i), lw=1, alpha=0.45, marker=".")
        ax.plot(steps, ema(values, span), color=color(i), ls=dashes(i), lw=2.5)
        chosen = run.selection.chosen if run.selection else None
        if chosen is not None:
            ax.axvline(chosen.step, color=color(i), ls=":", lw=1.5)
            ax.plot([chosen.step], [chosen.ema], marker="*", ms=16, color=color(i), mec="black")
    ax.set_xlabel("global step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("reward/avg_raw_reward")
    ax.grid(alpha=0.3)
    fig.suptitle(f"Reward: raw (thin) and trailing EMA, span {span} (thick); star = selected checkpoint")
    _legend(fig, runs)
    return fig


def line_figure(runs: list[Run], panel: Panel) -> Figure | None:
    """One subplot per key of ``panel`` that some run logged; every arm one line."""
    logged = set().union(*(r.keys() for r in runs))
    keys = [k for k in panel.keys if k in logged]
    if panel.prefix:
        keys += sorted(k for k in logged if k.startswith(panel.prefix) and k not in keys)
    if not keys:
        return None
    fig, axes = _grid(len(keys))
    for ax, key in zip(axes, keys):
        for run in runs:
            steps, values = run.steps(key)
            if steps:
                ax.plot(steps, values, color=color(run.arm), ls=dashes(run.arm), lw=1.8,
                        marker="." if len(steps) < 40 else None)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("global step", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(panel.title)
    _legend(fig, runs)
    return fig


def _stacked_figure(runs: list[Run], prefix: str, title: str, skip: frozenset[str] = frozenset()) -> Figure | None:
    """Per arm, one subplot of stacked bars per step: the keys under ``prefix``."""
    shown = [(r, sorted(k for k in r.keys() if k.startswith(prefix) and k not in skip)) for r in runs]
    shown = [(r, ks) for r, ks in shown if ks]
    if not shown:
        return None
    names = sorted({k.removeprefix(prefix) for _, ks in shown for k in ks})
    fig, axes = _grid(len(shown), row_in=3.4)
    for ax, (run, _) in zip(axes, shown):
        steps = [r["global_step"] for r in run.records]
        bottom = [0.0] * len(steps)
        for j, name in enumerate(names):
            values = [float(r.get(prefix + name, 0.0) or 0.0) for r in run.records]
            ax.bar(steps, values, bottom=bottom, color=STACK_COLORS[j % len(STACK_COLORS)], label=name, width=0.8)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_title(run.label, fontsize=10)
        ax.set_xlabel("global step", fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(names), 5), fontsize=9)
    fig.suptitle(title)
    return fig


def outcome_figure(runs: list[Run]) -> Figure | None:
    """Outcome classes (``outcome/*`` counts) per step, stacked, one subplot per arm."""
    return _stacked_figure(runs, "outcome/", "Outcome classes per step (episodes)")


def timing_figure(runs: list[Run]) -> Figure | None:
    """Seconds per phase (``timing/*`` except the step total), stacked, one subplot per arm."""
    return _stacked_figure(runs, "timing/", "Time per phase (s)", skip=frozenset({"timing/step_s"}))


def all_figures(runs: list[Run], span: int = 5) -> list[tuple[str, str, Figure]]:
    """Every panel that has data, in report order: (name, title, figure)."""
    out: list[tuple[str, str, Figure | None]] = [("reward", "Reward and its trailing EMA", reward_figure(runs, span))]
    out += [(p.name, p.title, line_figure(runs, p)) for p in LINE_PANELS]
    out += [("timing", "Time per phase", timing_figure(runs)), ("outcomes", "Outcome classes", outcome_figure(runs))]
    return [(name, title, fig) for name, title, fig in out if fig is not None]
