"""W&B offline runs hold the run's metrics, its resolved config and plan, and the selected checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from swerl.trainer.config import LoggingConfig, TrainConfig
from swerl.trainer.tracking.metrics import MetricsSink
from swerl.trainer.setup.plan import make_plan
from swerl.trainer.tracking.trackers import MlflowConfig, WandbConfig, log_selection, open_trackers

from .._support import train_tiny_run
from .._wandb_file import read_wandb_run

pytest.importorskip("wandb")  # in the dev extra; CI installs it


def _wandb_runs(run_dir: Path) -> list[dict]:
    return [read_wandb_run(p) for p in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))]


def test_wandb_offline_run_holds_metrics_config_plan_and_selection(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("WANDB_MODE", "offline")
    caplog.set_level("INFO", logger="swerl.trainer.tracking.trackers")
    cfg = TrainConfig.model_validate({"data": {"tasks": "tasks/"}, "logging": {"wandb": {"project": "swerl-test"}},
                                      "loop": {"train_batch_size": 2}})
    plan = make_plan(cfg, 4)
    trackers = open_trackers(cfg.logging, tmp_path, cfg.model_dump(mode="json"), plan)
    # One line says where it writes and how to upload: the path in it is the run's folder.
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("W&B")]
    pattern = line.rsplit("`wandb sync ", 1)[1].rstrip("`")
    assert line.startswith("W&B (offline): writing ") and len(list(Path("/").glob(pattern.lstrip("/")))) == 1
    sink = MetricsSink(tmp_path, trackers=trackers)
    for step, reward in [(1, 0.25), (2, 0.5), (3, 0.75)]:
        sink.log(step, {"reward/avg_raw_reward": reward, "grad_norm": 1.0 / step})
    sink.close()
    log_selection(cfg.logging, tmp_path, {"step": 2, "ema": 0.4, "metric": "reward/avg_raw_reward"})

    runs = _wandb_runs(tmp_path)
    assert runs, "no offline run file under RUN_DIR/wandb"
    history = [h for run in runs for h in run["history"]]
    assert [(h["_step"], h["reward/avg_raw_reward"]) for h in history] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    config = runs[0]["config"]
    assert config["algorithm"]["loss_reduction"] == cfg.algorithm.loss_reduction
    assert config["plan"]["total_steps"] == plan.total_steps
    summary = {k: v for run in runs for k, v in run["summary"].items()}
    assert summary["selection/step"] == 2 and summary["selection/ema"] == 0.4


def test_no_tracker_unless_asked(tmp_path):
    assert open_trackers(LoggingConfig(), tmp_path, {}, {}) == []
    assert not (tmp_path / "wandb").exists()


def test_true_turns_a_tracker_on_with_its_defaults():
    on = LoggingConfig.model_validate({"wandb": True, "mlflow": True})
    assert on.wandb == WandbConfig() and on.mlflow == MlflowConfig()
    assert LoggingConfig.model_validate({"wandb": False, "mlflow": False}) == LoggingConfig()


@pytest.mark.docker
@pytest.mark.slow
def test_swerl_train_logs_to_an_offline_wandb_run(tmp_path, tiny_model_dir):
    """The real loop and CLI: every step's record, the config with the plan, then the selection."""
    _, run_dir, records = train_tiny_run(tmp_path, tiny_model_dir, {"wandb": {"project": "swerl-test"}})
    runs = _wandb_runs(run_dir)
    history = [h for run in runs for h in run["history"]]
    assert [h["_step"] for h in history] == [1, 2]
    assert [h["reward/avg_raw_reward"] for h in history] == [r["reward/avg_raw_reward"] for r in records]
    assert runs[0]["config"]["plan"]["total_steps"] == 2
    summary = {k: v for run in runs for k, v in run["summary"].items()}
    assert summary["selection/step"] == 2 and summary["selection/export_path"].endswith("global_step_2")
