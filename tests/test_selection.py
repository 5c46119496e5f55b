"""Checkpoint selection (docs/algorithms.md, Metrics and checkpoint selection): the EMA rule, eligibility, malformed input, and the CLI."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.selection import MetricsFileError, ema, read_metric, select_checkpoint

METRIC = "reward/avg_raw_reward"


def _write_metrics(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        for row in rows:
            fh.write((row if isinstance(row, str) else json.dumps(row)) + "\n")


def _run(tmp_path: Path, series: dict[int, float], exports=None, name="run") -> Path:
    run = tmp_path / name
    _write_metrics(run / "metrics.jsonl", [{"global_step": s, METRIC: v, "loss/policy": -v} for s, v in series.items()])
    for step in series if exports is None else exports:
        (run / "exports" / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
    return run


def test_ema_recursion_by_hand_on_ten_steps():
    values = [0.1, 0.4, 0.2, 0.5, 0.3, 0.6, 0.7, 0.2, 0.9, 0.4]
    expected = [0.1]
    for v in values[1:]:
        expected.append(v / 3 + expected[-1] * 2 / 3)
    assert ema(values, 5) == pytest.approx(expected)
    assert ema(values, 5)[1] == pytest.approx(0.4 / 3 + 0.1 * 2 / 3)  # 0.2
    assert ema(values, 1) == values


def test_selects_argmax_ema_over_eligible_steps(tmp_path):
    series = {s: 0.1 * s for s in range(1, 11)}
    series.update({11: 0.2, 12: 0.2, 13: 0.2, 14: 0.2, 15: 0.2})
    run = _run(tmp_path, series)
    sel = select_checkpoint(run)
    emas = dict(zip(series, ema(list(series.values()), 5)))
    assert sel.chosen.step == 10 and sel.chosen.ema == pytest.approx(emas[10])
    assert emas[15] < emas[10]
    assert sel.chosen.export_path == str(run / "exports" / "global_step_10")
    by_step = {c.step: c for c in sel.candidates}
    assert by_step[5].reason.startswith("before step 10") and by_step[7].reason == "not a multiple of 5"
    assert [c.step for c in sel.candidates if c.eligible] == [10, 15]


def test_duplicated_steps_first_value_wins_and_unsorted_input(tmp_path):
    run = tmp_path / "run"
    _write_metrics(run / "metrics.jsonl", [
        {"global_step": 15, METRIC: 0.9}, {"global_step": 10, METRIC: 0.5},
        {"global_step": 12, METRIC: 0.1}, {"global_step": 10, METRIC: 0.0},
    ])
    _write_metrics(run / "restart_1" / "metrics.jsonl", [{"global_step": 15, METRIC: 0.0}, {"global_step": 20, METRIC: 0.3}])
    series, _ = read_metric(run, METRIC)
    assert series == [(10, 0.5), (12, 0.1), (15, 0.9), (20, 0.3)]


def test_restart_files_are_all_read(tmp_path):
    run = _run(tmp_path, {s: 0.1 for s in range(1, 11)})
    _write_metrics(run / "resume" / "metrics.jsonl", [{"global_step": s, METRIC: 0.9} for s in range(11, 16)])
    (run / "exports" / "global_step_15").mkdir(parents=True)
    assert select_checkpoint(run).chosen.step == 15


def test_step_zero_outlier_is_never_selected(tmp_path):
    series = {0: 1.0, 5: 0.0, 10: 0.0, 15: 0.05, 20: 0.05}
    sel = select_checkpoint(_run(tmp_path, series))
    assert sel.candidates[0].ema == 1.0 and not sel.candidates[0].eligible
    assert sel.chosen.step in (10, 15, 20) and sel.chosen.step != 0


def test_missing_export_folder_makes_a_step_ineligible(tmp_path):
    series = {10: 0.1, 15: 0.9, 20: 0.5}
    sel = select_checkpoint(_run(tmp_path, series, exports=[10, 20]))
    assert sel.chosen.step == 20
    assert {c.step: c.reason for c in sel.candidates}[15] == "no export exports/global_step_15"


def test_ties_go_to_the_earlier_step(tmp_path):
    sel = select_checkpoint(_run(tmp_path, {10: 0.5, 15: 0.5, 20: 0.5}))
    assert sel.chosen.step == 10


def test_min_mode_picks_the_lowest_ema(tmp_path):
    run = _run(tmp_path, {10: 0.2, 15: 0.9, 20: 0.4})
    assert select_checkpoint(run, metric="loss/policy", mode="min").chosen.step == 15
    assert select_checkpoint(run, metric="loss/policy", mode="max").chosen.step == 10


def test_interval_from_config_yaml_and_override(tmp_path):
    run = _run(tmp_path, {4: 0.1, 6: 0.9, 8: 0.0, 10: 0.0, 11: 0.0})
    (run / "config.yaml").write_text("checkpointing:\n  ckpt_interval: 1\n  hf_save_interval: 2\n")
    sel = select_checkpoint(run)
    assert sel.interval == 2 and sel.chosen.step == 6
    assert select_checkpoint(run, interval=4).chosen.step == 8


def test_no_eligible_step_returns_none(tmp_path):
    assert select_checkpoint(_run(tmp_path, {1: 0.5, 2: 0.5, 5: 0.9})).chosen is None


def test_malformed_lines_name_file_and_line(tmp_path):
    run = _run(tmp_path, {10: 0.5, 15: 0.6})
    _write_metrics(run / "metrics.jsonl", ['{"global_step": 20, "reward/avg', {"global_step": "x", METRIC: 1}])
    with pytest.raises(MetricsFileError, match=r"metrics.jsonl:3: .*and 1 more.*--skip-bad-lines") as info:
        select_checkpoint(run)
    assert info.value.exit_code == 2
    sel = select_checkpoint(run, skip_bad_lines=True)
    assert sel.chosen.step == 15 and len(sel.skipped_lines) == 2 and sel.skipped_lines[1].endswith(
        "global_step must be a non-negative integer, got 'x'")


def test_non_finite_metric_value_is_malformed(tmp_path):
    run = tmp_path / "run"
    _write_metrics(run / "metrics.jsonl", ['{"global_step": 10, "reward/avg_raw_reward": NaN}'])
    with pytest.raises(MetricsFileError, match="finite"):
        select_checkpoint(run)


def test_unknown_metric_suggests_the_closest_key_else_lists_rewards_first(tmp_path):
    run = _run(tmp_path, {10: 0.5})
    with pytest.raises(MetricsFileError, match=r"--metric reward/avg_raw_rewrd: .*did you mean 'reward/avg_raw_reward'\?"):
        select_checkpoint(run, metric="reward/avg_raw_rewrd")
    with pytest.raises(MetricsFileError, match="known keys: reward/avg_raw_reward, loss/policy$"):
        select_checkpoint(run, metric="zzz")


runner = CliRunner()


def test_cli_prints_table_and_choice(tmp_path):
    series = {s: 0.1 * (s % 7) for s in range(1, 21)}
    run = _run(tmp_path, series, exports=[5, 10, 15, 20])
    emas = dict(zip(series, ema(list(series.values()), 5)))
    best = max((10, 15, 20), key=lambda s: (emas[s], -s))
    result = runner.invoke(app, ["select-checkpoint", str(run)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "not a multiple of 5" in result.output and "selected" in result.output
    assert f"selected step {best}: EMA {emas[best]:.4f}" in result.output
    assert f"global_step_{best}" in result.output


def test_cli_json_output(tmp_path):
    run = _run(tmp_path, {10: 0.2, 15: 0.8})
    result = runner.invoke(app, ["select-checkpoint", str(run), "--json", "-", "--span", "1"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["chosen"]["step"] == 15 and data["chosen"]["ema"] == 0.8 and len(data["candidates"]) == 2


def test_cli_exit_codes_through_main(tmp_path):
    import subprocess
    import sys

    exe = [sys.executable, "-c", "from swerl.cli import main; main()", "select-checkpoint"]
    none = _run(tmp_path, {1: 0.5, 3: 0.5}, name="none")
    proc = subprocess.run([*exe, str(none)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "no eligible step" in proc.stderr and "Traceback" not in proc.stderr
    bad = _run(tmp_path, {10: 0.5}, name="bad")
    _write_metrics(bad / "metrics.jsonl", ["not json"])
    proc = subprocess.run([*exe, str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "metrics.jsonl:2" in proc.stderr
    proc = subprocess.run([*exe, str(bad), "--skip-bad-lines"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "selected step 10" in proc.stdout
    proc = subprocess.run([*exe, str(tmp_path / "absent")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_cli_rejects_unknown_mode(tmp_path):
    result = runner.invoke(app, ["select-checkpoint", str(_run(tmp_path, {10: 0.5})), "--mode", "median"])
    assert result.exit_code == 2 and "Invalid value for '--mode'" in result.output and "'max'" in result.output
