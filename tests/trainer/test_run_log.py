"""`swerl train` writes RUN_DIR/train.log (appended by a resume) and beats a heartbeat off a terminal."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.trainer.loop import TrainEvent, TrainResult

ROOT = Path(__file__).resolve().parents[2]
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 512}


def _slow_train(cfg, run_dir, resume, *, on_event):  # noqa: ANN001 - stands in for swerl.trainer.loop.train
    """Logs one line, then sits in a rollout phase long enough for heartbeats."""
    logging.getLogger("swerl.trainer.loop").info("resume=%s", resume)
    on_event(TrainEvent("step_start", 1, 4))
    time.sleep(0.5)
    return TrainResult(run_dir=run_dir, steps_trained=1, last_step=1)


@pytest.mark.docker  # the preflight before the run checks the Docker engine and the base image
def test_train_log_in_the_run_dir_is_appended_and_has_heartbeats(tmp_path, monkeypatch):
    monkeypatch.setattr("swerl.trainer.loop.train", _slow_train)
    monkeypatch.setenv("SWERL_HEARTBEAT_S", "0.1")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    run_dir = tmp_path / "run"
    args = ["train", str(DEMO_YAML), "-o", str(run_dir), "--set", f"data.tasks={FIXTURE_TASKS}", "--set",
            "data.names=null", "--set", "loop.train_batch_size=1", "--set", f"model.path={model}"]
    for resume in ([], ["--resume", "latest"]):
        result = CliRunner().invoke(app, [*args, *resume])
        assert result.exit_code == 0, result.output
    text = (run_dir / "train.log").read_text()
    assert "resume=None" in text and "resume=latest" in text and text.index("resume=None") < text.index("resume=latest")
    beats = re.findall(r"^\S+Z INFO +swerl\.heartbeat: step 1/\? rollouts: 0/4 episodes done, \d+ s$", text, re.M)
    assert len(beats) >= 2
