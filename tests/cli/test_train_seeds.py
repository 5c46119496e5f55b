"""`swerl train CONFIG --seeds 0,1,2`: one run per seed in RUN_DIR/seed<S> with seed=S; a bad list,
or what cannot apply to several runs, is one line, exit 2, before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 512}


@pytest.mark.parametrize("seeds, resume, message", [
    ("0,x", None, "--seeds 0,x: give integers"),
    ("1,1", None, "give distinct integers"),
    ("0,1", "checkpoints/global_step_2", "only 'latest' applies"),
])
def test_bad_seed_lists_are_input_errors(seeds, resume, message, tmp_path):
    argv = ["train", str(DEMO_YAML), "--seeds", seeds, "-o", str(tmp_path / "arm")]
    result = CliRunner().invoke(app, argv + (["--resume", resume] if resume else []))
    assert isinstance(result.exception, ConfigError) and message in str(result.exception)
    assert not (tmp_path / "arm").exists()


@pytest.mark.docker
def test_each_seed_gets_its_own_run_dir_and_seed(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    result = CliRunner().invoke(app, [
        "train", str(DEMO_YAML), "--dry-run", "--seeds", "3,5", "-o", str(tmp_path / "arm"),
        "--set", f"data.tasks={FIXTURE_TASKS}", "--set", "data.names=null", "--set", "loop.train_batch_size=1",
        "--set", f"model.path={model}", "--json", str(tmp_path / "plans.json")])
    assert result.exit_code == 0, result.output
    plans = json.loads((tmp_path / "plans.json").read_text())
    assert [p["config"]["seed"] for p in plans] == [3, 5]
    assert f"seed replica 3: {tmp_path / 'arm' / 'seed3'}" in result.output
    assert f"run plan ({tmp_path / 'arm' / 'seed5'})" in result.output
