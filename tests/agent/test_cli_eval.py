"""``swerl eval`` through the real CLI: a tiny random-weight model saved as an HF folder,
real sandboxes on the fixture tasks, the output files and the summary table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.cli import app

FIXTURE_TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


@pytest.mark.docker
def test_eval_reports_pass_at_k_and_writes_every_trajectory(tiny_model_dir, tmp_path):
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, [
        "eval", str(FIXTURE_TASKS), "--model", str(tiny_model_dir), "--protocol", "single-turn",
        "--samples", "2", "--limit", "2", "--max-new-tokens", "8", "--concurrency", "2", "--seed", "1",
        "--out", str(out),
    ])
    assert result.exit_code == 0, result.output
    assert "pass@1" in result.output and "pass@2" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == str(tiny_model_dir) and summary["num_trajectories"] == 4
    assert summary["pass@1"] == 0.0  # random weights write no solution
    assert 0 < summary["tokens/generated_mean"] <= 8
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert [r["task"] for r in rows] == ["add-two", "add-two", "count-vowels", "count-vowels"]
    assert all(r["outcome"] == "failed" and r["verifier_output_tail"] for r in rows)
    assert all(r["generated_tokens"] >= 1 and r["messages"][-1]["role"] == "assistant" for r in rows)


def test_eval_rejects_an_unknown_protocol_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "swerl.cli", "eval", str(FIXTURE_TASKS), "--protocol", "bogus", "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "--protocol" in lines[0], proc.stderr
    assert "bogus" in lines[0] and "terminus-json" in lines[0]
    assert not (tmp_path / "o").exists()
