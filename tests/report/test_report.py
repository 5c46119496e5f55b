"""``swerl report``: arms labelled by their config differences, the selected checkpoint marked, and
an HTML page whose screenshot in headless Chromium shows the plots."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.errors import ConfigError
from swerl.report.plots import COLORS, reward_figure
from swerl.report.report import build_report
from swerl.report.runs import Run, label_arms, load_run
from swerl.selection import select_checkpoint

FIXTURES = Path(__file__).parent / "fixtures"
ARMS = [FIXTURES / "arm-token-mean", FIXTURES / "arm-seqnorm-notis"]


def test_arms_are_labelled_by_how_their_configs_differ():
    runs = [load_run(d) for d in ARMS]
    diffs = label_arms(runs)
    assert diffs == ["algorithm.loss_reduction", "algorithm.max_seq_len", "algorithm.use_tis", "seed"]
    assert runs[0].label == "loss_reduction=token_mean, max_seq_len=null, use_tis=true, seed=0"
    assert runs[1].label == "loss_reduction=seq_mean_token_sum_norm_global, max_seq_len=256, use_tis=false, seed=1"


def test_a_nested_block_is_one_part_of_the_label():
    """Correction arms: the seed alias (no block), a sequence MIS block, a geometric block; the
    block's differing fields make one part, a run without the block shows null."""
    def algo(use_tis, block):
        return {"seed": 0, "algorithm": {"use_tis": use_tis, "kl_loss_coef": 0.0, "rollout_correction": block}}

    mis = {"level": "sequence", "mode": "mask", "high": 2.0, "low": None}
    geo = {"level": "geometric", "mode": "mask", "high": 1.001, "low": None}
    runs = [Run(Path(name), [], config) for name, config in
            (("seed", algo(True, None)), ("mis", algo(False, mis)), ("geo", algo(False, geo)))]
    runs[1].config["algorithm"]["kl_loss_coef"] = 0.001
    diffs = label_arms(runs)
    assert diffs == ["algorithm.kl_loss_coef", "algorithm.rollout_correction.high", "algorithm.rollout_correction.level",
                     "algorithm.rollout_correction.mode", "algorithm.use_tis"]
    assert [r.label for r in runs] == [  # 5 differing keys, 3 parts: nothing cut by max_keys=4
        "kl_loss_coef=0.0, rollout_correction=null, use_tis=true",
        "kl_loss_coef=0.001, rollout_correction={level: sequence, mode: mask, high: 2.0}, use_tis=false",
        "kl_loss_coef=0.0, rollout_correction={level: geometric, mode: mask, high: 1.001}, use_tis=false",
    ]


def test_one_run_is_labelled_by_its_folder():
    (run,) = [load_run(ARMS[0])]
    label_arms([run])
    assert run.label == "arm-token-mean"


def test_the_reward_plot_marks_the_checkpoint_select_checkpoint_picks():
    runs = [load_run(d) for d in ARMS]
    label_arms(runs)
    fig = reward_figure(runs)
    stars = [(line.get_xdata()[0], line.get_ydata()[0]) for line in fig.axes[0].lines if line.get_marker() == "*"]
    expected = [select_checkpoint(d).chosen for d in ARMS]
    assert stars == [(c.step, pytest.approx(c.ema)) for c in expected]


def _screenshot(html: Path, out: Path, height: int) -> Path:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("chromium is not installed: apt-get install chromium (.ci/run installs it)")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={out.parent / 'chromium-profile'}", f"--window-size=1300,{height}",
                    f"--screenshot={out}", html.as_uri()], check=True, capture_output=True, timeout=180)
    return out


def _pixels_near(image: np.ndarray, hex_color: str, tol: int = 40) -> int:
    """Pixels of an (H, W, 3) uint8 image within ``tol`` of ``hex_color`` on every channel."""
    ref = np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    return int((np.abs(image.astype(np.int16) - ref) <= tol).all(axis=-1).sum())


def test_report_screenshot_shows_the_plots_of_both_arms(tmp_path):
    from PIL import Image

    out = tmp_path / "report" / "report.html"
    result = build_report(ARMS, out)
    names = [p.name for p in result.png_paths]
    assert names[:2] == ["report-reward.png", "report-pass_at_n.png"]
    assert {"report-lengths.png", "report-timing.png", "report-outcomes.png"} <= set(names)
    assert "report-staleness.png" not in names  # no run logged async/staleness_mean
    page = out.read_text()
    assert page.count('<img alt="') == len(names) and page.count("data:image/png;base64,") == len(names)

    shot = np.asarray(Image.open(_screenshot(out, tmp_path / "shot.png", height=7000)).convert("RGB"))
    non_white = float((shot.min(axis=-1) < 235).mean())
    arm0, arm1 = _pixels_near(shot, COLORS[0]), _pixels_near(shot, COLORS[1])
    print(f"screenshot {shot.shape[1]}x{shot.shape[0]}: non-white {non_white:.3f}, arm pixels {arm0} / {arm1}")
    assert non_white > 0.05, "the page rendered (almost) blank"
    assert arm0 > 2000 and arm1 > 2000, "the arms' curves are not visible in the screenshot"


def test_cli_report_writes_the_page_and_prints_the_arms_table(tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", *map(str, ARMS), "--out", str(out)], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert out.is_file() and (tmp_path / "r-reward.png").is_file()
    assert "final EMA" in result.output and "selected step" in result.output


def test_a_folder_without_metrics_is_a_one_line_input_error(tmp_path):
    with pytest.raises(ConfigError, match="no metrics.jsonl"):
        build_report([tmp_path], tmp_path / "r.html")
    import sys

    proc = subprocess.run([sys.executable, "-c", "from swerl.cli import main; main()", "report", str(tmp_path / "missing"),
                           "--out", str(tmp_path / "r.html")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr
