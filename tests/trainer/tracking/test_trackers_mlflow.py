"""An MLflow file store holds the run's metrics, its resolved config and plan, and the selected
checkpoint; read back through MLflow's own client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swerl.trainer.config import TrainConfig
from swerl.trainer.tracking.metrics import MetricsSink
from swerl.trainer.setup.plan import make_plan
from swerl.trainer.tracking.trackers import _mlflow_client, log_selection, mlflow_key, open_trackers

from .._support import train_tiny_run

pytest.importorskip(
    "mlflow", reason="mlflow is not installed (the optional extra `swerl[mlflow]`; mlflow-skinny caps cachetools<8)")


def _store(run_dir: Path, cfg: TrainConfig):
    client = _mlflow_client(cfg.logging.mlflow, run_dir)
    run_id = json.loads((run_dir / "trackers.json").read_text())["mlflow"]
    return client, run_id


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_mlflow_keys_keep_slashes_and_spell_out_at():
    assert mlflow_key("eval/pass@1") == "eval/pass_at_1"
    assert mlflow_key("reward/avg_raw_reward") == "reward/avg_raw_reward"


def test_mlflow_store_holds_metrics_config_plan_and_selection(tmp_path, caplog):
    caplog.set_level("INFO", logger="swerl.trainer.tracking.trackers")
    cfg = TrainConfig.model_validate({"data": {"tasks": "tasks/"}, "logging": {"mlflow": {"experiment": "swerl-test"}},
                                      "loop": {"train_batch_size": 2}})
    plan = make_plan(cfg, 4)
    sink = MetricsSink(tmp_path, trackers=open_trackers(cfg.logging, tmp_path, cfg.model_dump(mode="json"), plan))
    store = (tmp_path / "mlruns").resolve().as_uri()
    assert f"of experiment 'swerl-test' in {store}; view with `mlflow ui --backend-store-uri {store}`" in caplog.text
    for step, reward in [(1, 0.25), (2, 0.5), (3, 0.75)]:
        sink.log(step, {"reward/avg_raw_reward": reward, "eval/pass@1": reward / 2})
    sink.close()
    log_selection(cfg.logging, tmp_path, {"step": 2, "ema": 0.4, "metric": "reward/avg_raw_reward"})

    assert (tmp_path / "mlruns").is_dir()
    client, run_id = _store(tmp_path, cfg)
    assert _history(client, run_id, "reward/avg_raw_reward") == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert _history(client, run_id, "eval/pass_at_1") == [(1, 0.125), (2, 0.25), (3, 0.375)]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == tmp_path.name
    assert run.data.params["algorithm.loss_reduction"] == cfg.algorithm.loss_reduction
    assert run.data.tags["selection/step"] == "2" and run.data.tags["selection/ema"] == "0.4"
    plan_file = Path(client.download_artifacts(run_id, "plan.json", str(tmp_path / "dl")))
    assert json.loads(plan_file.read_text())["total_steps"] == plan.total_steps


def test_a_resumed_run_dir_continues_the_same_mlflow_run(tmp_path):
    cfg = TrainConfig.model_validate({"data": {"tasks": "tasks/"}, "logging": {"mlflow": {}}})
    for step in (1, 2):  # two sessions of one run directory
        sink = MetricsSink(tmp_path, trackers=open_trackers(cfg.logging, tmp_path, cfg.model_dump(mode="json"), {}))
        sink.log(step, {"reward/avg_raw_reward": float(step)})
        sink.close()
    client, run_id = _store(tmp_path, cfg)
    assert _history(client, run_id, "reward/avg_raw_reward") == [(1, 1.0), (2, 2.0)]
    assert len(client.search_runs([client.get_experiment_by_name("swerl").experiment_id])) == 1


@pytest.mark.docker
@pytest.mark.slow
def test_swerl_train_logs_to_an_mlflow_file_store(tmp_path, tiny_model_dir):
    """The real loop and CLI: every step's record, the config and plan, then the selection."""
    config, run_dir, records = train_tiny_run(tmp_path, tiny_model_dir, {"mlflow": {"experiment": "swerl-test"}})
    client, run_id = _store(run_dir, TrainConfig.model_validate(config))
    assert _history(client, run_id, "reward/avg_raw_reward") == [(r["global_step"], r["reward/avg_raw_reward"])
                                                                 for r in records]
    run = client.get_run(run_id)
    assert run.data.params["loop.max_steps"] == "2"
    assert run.data.tags["selection/step"] == "2" and run.data.tags["selection/export_path"].endswith("global_step_2")
