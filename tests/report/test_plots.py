"""The report's figures, checked on the data they draw: timing bars that partition the step,
integer step ticks, outcome colours by meaning, plain titles with units, constant panels left
out and named, y ranges that do not magnify noise."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from swerl.report.plots import all_figures, line_figure, reward_figure, timing_figure, outcome_figure, Panel
from swerl.report.runs import Run

SYNC = {"timing/rollout_s": 100.0, "timing/wait_for_rollouts_s": 100.0, "timing/update_s": 8.0,
        "timing/weight_sync_s": 1.0, "timing/export_s": 3.0, "timing/step_s": 113.0}


def _run(records: list[dict], name: str = "run") -> Run:
    run = Run(run_dir=Path(name), records=[{"global_step": s, **r} for s, r in enumerate(records, start=1)])
    run.label = name
    return run


def _bar_totals(ax) -> dict[float, float]:  # noqa: ANN001
    totals: dict[float, float] = {}
    for patch in ax.patches:
        x = round(patch.get_x() + patch.get_width() / 2, 6)
        totals[x] = totals.get(x, 0.0) + patch.get_height()
    return totals


def test_timing_bars_partition_the_step_of_a_synchronous_run():
    run = _run([SYNC, {**SYNC, "timing/step_s": 120.0}])
    fig = timing_figure([run])
    ax = fig.axes[0]
    # rollout_s and wait_for_rollouts_s are the same 100 s here: stacked once, not twice.
    assert _bar_totals(ax) == {1.0: pytest.approx(113.0), 2.0: pytest.approx(120.0)}
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[0] == "rollouts (trainer waiting)" and labels[-1] == "other (advantages, logging)"
    assert not any(line.get_label().startswith("rollout collection") for line in ax.lines)


def test_a_pipelined_runs_collection_is_drawn_as_overlap_not_stacked():
    piped = {**SYNC, "timing/wait_for_rollouts_s": 0.5, "timing/step_s": 13.0}
    ax = timing_figure([_run([piped, piped])]).axes[0]
    assert _bar_totals(ax) == {1.0: pytest.approx(13.0), 2.0: pytest.approx(13.0)}
    (marker,) = [line for line in ax.lines if line.get_label().startswith("rollout collection")]
    assert list(marker.get_ydata()) == [100.0, 100.0]


def test_every_panel_has_integer_step_ticks():
    records = [{**SYNC, "reward/avg_raw_reward": r, "reward/num_trajectories": 16.0, "grad_norm": 0.1 * s,
                "outcome/passed": 2.0, "outcome/failed": 14.0, "response_length/mean": 50.0 + s}
               for s, r in enumerate([0.1, 0.2, 0.15])]
    figures, _ = all_figures([_run(records)])
    assert {name for name, _, _ in figures} >= {"reward", "update", "timing", "outcomes", "lengths"}
    for name, _, fig in figures:
        for ax in fig.axes:
            if ax.get_visible() and ax.get_xlabel():
                ticks = list(ax.get_xticks())
                assert ticks and all(float(t).is_integer() for t in ticks), (name, ticks)


def test_outcomes_are_coloured_by_meaning():
    fig = outcome_figure([_run([{"outcome/passed": 3.0, "outcome/failed": 12.0, "outcome/sandbox_error": 1.0}])])
    colours = {t.get_text(): to_hex(h.get_facecolor()) for h, t in
               zip(fig.legends[0].legend_handles, fig.legends[0].get_texts())}
    assert colours["passed"] == "#2ca02c" and colours["failed"] == "#d62728"
    assert colours["sandbox_error"] not in {"#2ca02c", "#d62728"}


def test_constant_metrics_are_left_out_and_named():
    records = [{"tis/imp_ratio_mean": 1.0 + 0.01 * s, "tis/rows_without_logprobs": 0.0,
                "async/staleness_mean": 0.0, "async/staleness_max": 0.0, "reward/avg_pass_at_n": 0.0}
               for s in range(3)]
    figures, hidden = all_figures([_run(records)])
    names = {name for name, _, _ in figures}
    assert hidden == {"tis/rows_without_logprobs": 0.0, "async/staleness_mean": 0.0, "async/staleness_max": 0.0}
    assert "staleness" not in names and "tis" in names
    assert "pass_at_n" in names  # a reward metric stuck at 0 is news: never hidden
    tis = dict((n, f) for n, _, f in figures)["tis"]
    assert [ax.get_title() for ax in tis.axes if ax.get_visible()] == ["TIS importance weight, mean (ratio)"]


def test_titles_are_plain_words_with_units():
    records = [{"response_length/mean": 40.0 + s, "response_length/clip_fraction": 0.1 * s} for s in range(3)]
    fig = line_figure([_run(records)], Panel("lengths", "Response length", ("response_length/mean",
                                                                            "response_length/clip_fraction")))
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles == ["mean response length (tokens)", "responses cut at max_new_tokens (fraction of episodes)"]


def test_y_ranges_do_not_magnify_noise():
    flat = [{"grad_norm": 1.0 + 1e-7 * (s % 2)} for s in range(4)]
    fig = line_figure([_run(flat)], Panel("update", "Policy update", ("grad_norm",), hide_constant=False))
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert high - low >= 0.1 - 1e-9  # a tenth of the magnitude, not 1e-7
    fig.canvas.draw()
    assert ax.yaxis.get_offset_text().get_text() == ""  # no "1e-7+9.99999e-1"
    lengths = [{"response_length/mean": v} for v in (90.0, 77.0, 85.0)]
    ax = line_figure([_run(lengths)], Panel("lengths", "Lengths", ("response_length/mean",))).axes[0]
    assert ax.get_ylim()[0] == 0.0  # a count starts at 0: 77-90 tokens is not a cliff
    loss = [{"loss/policy": v} for v in (100.0, 100.5, 99.8)]
    low, high = line_figure([_run(loss)], Panel("update", "Update", ("loss/policy",))).axes[0].get_ylim()
    assert high - low == pytest.approx(10.05)  # unbounded: a tenth of its magnitude at least
    rewards = [{"reward/avg_raw_reward": r, "reward/num_trajectories": 16.0} for r in (0.06, 0.25, 0.12, 0.2)]
    low, high = reward_figure([_run(rewards)]).axes[0].get_ylim()
    assert low <= 0.0 and high >= 0.3  # the reward axis starts at 0 and holds the noise band
