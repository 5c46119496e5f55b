"""`swerl train` writes RUN_DIR/train.log (appended by a resume) and beats a heartbeat off a terminal."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
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


def _slow_train(cfg, run_dir, resume, *, on_event, checked):  # noqa: ANN001 - stands in for swerl.trainer.loop.train
    """Logs one line, then sits in a rollout phase long enough for heartbeats."""
    logging.getLogger("swerl.trainer.loop").info("resume=%s", resume)
    on_event(TrainEvent("step_start", 1, 4))
    time.sleep(0.5)
    return TrainResult(run_dir=run_dir, steps_trained=1, last_step=1)


@pytest.mark.docker  # the preflight before the run checks the Docker engine and the base image
def test_train_log_in_the_run_dir_is_appended_and_has_heartbeats(tmp_path, monkeypatch):
    from swerl.trainer.setup.preflight import usable_cores

    monkeypatch.setattr("swerl.trainer.loop.train", _slow_train)
    monkeypatch.setenv("SWERL_HEARTBEAT_S", "0.1")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    tasks = tmp_path / "tasks"  # one task.toml with a key the format lacks: the task loader warns
    shutil.copytree(FIXTURE_TASKS, tasks)
    toml = tasks / "add-two" / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\n", f"[agent]\nkey_{tmp_path.name} = 1\n"))
    run_dir = tmp_path / "run"
    args = ["train", str(DEMO_YAML), "-o", str(run_dir), "--set", f"data.tasks={tasks}", "--set",
            "data.names=null", "--set", "loop.train_batch_size=1", "--set", f"model.path={model}",
            "--set", f"sandbox.concurrency={8 * usable_cores() + 1}"]  # the preflight's CPU note
    for resume in ([], ["--resume", "latest"]):
        result = CliRunner().invoke(app, [*args, *resume])
        assert result.exit_code == 0, result.output
    text = (run_dir / "train.log").read_text()
    assert "resume=None" in text and "resume=latest" in text and text.index("resume=None") < text.index("resume=latest")
    beats = re.findall(r"^\S+Z INFO +swerl\.heartbeat: step 1/\? rollouts: 0/4 episodes done, \d+ s$", text, re.M)
    assert len(beats) >= 2
    # The preflight's warnings, logged before the run dir may be written, open the first run's log.
    first = text[: text.index("resume=None")]
    assert re.search(r"^\S+Z WARNING swerl\.tasks\.load: task\.toml key 'agent\.key_", first, re.M)
    assert re.search(r"^\S+Z WARNING swerl\.cli: CPU oversubscribed: ", first, re.M)


def test_a_python_warning_reaches_train_log_as_well_as_the_terminal(tmp_path):
    script = ("import pathlib, sys, warnings\n"
              "from swerl.cli.common import setup_logging\n"
              "from swerl.logs import attach_run_log\n"
              "setup_logging()\n"
              "attach_run_log(pathlib.Path(sys.argv[1]))\n"
              "warnings.warn('the tokenizer has no pad token', UserWarning)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True)
    assert "the tokenizer has no pad token" in done.stderr
    text = (tmp_path / "train.log").read_text()
    assert re.search(r"^\S+Z WARNING py\.warnings: .*UserWarning: the tokenizer has no pad token", text, re.M), text
