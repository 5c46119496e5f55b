"""`swerl eval --from-run RUN_DIR --step N`: the export of step N, evaluated with the run's
protocol, limits and sampling; which export without --step; flags that would be overridden."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from swerl.cli import app
from swerl.errors import ConfigError
from swerl.trainer.config import TrainConfig
from swerl.trainer.eval_from_run import eval_config_from_run, resolve_export
from swerl.trainer.loop import train

from ._support import tiny_run_config

TASKS = Path(__file__).resolve().parents[2] / "examples" / "learning_tasks"
RUN = tiny_run_config(
    "/models/base",
    data={"tasks": str(TASKS), "names": ["magic-a", "magic-b"]},
    agent={"protocol": "single-turn", "temperature": 1.0, "top_k": 5,
           "limits": {"max_new_tokens_per_turn": 4, "context_window_tokens": 256, "max_turns": 1}},
    sandbox={"concurrency": 3},
    loop={"train_batch_size": 2, "epochs": 3, "max_steps": 2, "micro_batch_size": 4},
)


def _fake_run(tmp_path: Path, rewards: list[float], exports: list[int]) -> Path:
    run = tmp_path / "run"
    (run / "exports").mkdir(parents=True)
    cfg = TrainConfig.model_validate({**RUN, "model": {"path": "/models/base", "device": "cpu"}})
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    lines = [json.dumps({"global_step": s, "reward/avg_raw_reward": r}) for s, r in enumerate(rewards, start=1)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for step in exports:
        (run / "exports" / f"global_step_{step}").mkdir()
    return run


def test_the_run_gives_protocol_limits_sampling_and_the_export_is_the_model(tmp_path):
    run = _fake_run(tmp_path, [0.0, 0.5, 0.25], exports=[1, 2, 3])
    config, which = eval_config_from_run(run, 2, tasks=TASKS, out_dir=tmp_path / "out", samples=3, limit=None,
                                         concurrency=None, resume=False)
    assert config.agent.protocol == "single-turn" and config.agent.temperature == 1.0 and config.agent.top_k == 5
    assert config.agent.limits.max_new_tokens_per_turn == 4 and config.agent.limits.context_window_tokens == 256
    assert config.inference.model == str(run / "exports" / "global_step_2") and config.inference.backend == "hf"
    assert config.concurrency == 3 and config.samples == 3 and which.startswith("step 2 ")


def test_without_step_the_selected_checkpoint_else_the_latest_export(tmp_path):
    run = _fake_run(tmp_path, [0.0, 1.0, 0.0, 0.0], exports=[1, 2, 3, 4])
    step, path, why = resolve_export(run, None)  # EMA: 0, 1/3, 2/9, 4/27: step 2 (>= 2 x interval 1)
    assert step == 2 and path.name == "global_step_2" and why.startswith("selected")
    (run / "metrics.jsonl").unlink()
    assert resolve_export(run, None)[0] == 4


def test_a_missing_export_names_the_exported_steps(tmp_path):
    run = _fake_run(tmp_path, [0.0, 0.5], exports=[1, 2])
    with pytest.raises(ConfigError, match=r"--step 7: no export .*exported steps: 1, 2"):
        resolve_export(run, 7)


def test_a_flag_the_run_sets_is_rejected_by_name(tmp_path):
    run = _fake_run(tmp_path, [0.0, 0.5], exports=[1, 2])
    result = CliRunner().invoke(app, ["eval", str(TASKS), "--from-run", str(run), "--temperature", "0.2"])
    assert isinstance(result.exception, ConfigError) and result.exception.exit_code == 2
    assert "drop --temperature" in str(result.exception)


def test_a_lora_runs_export_is_its_adapter_on_the_runs_base(tmp_path):
    run = _fake_run(tmp_path, [0.0, 0.5], exports=[1, 2])
    cfg = TrainConfig.model_validate({**RUN, "model": {"path": "/models/base", "device": "cpu", "lora": {"rank": 8}}})
    (run / "config.yaml").write_text(cfg.to_yaml())
    config, _ = eval_config_from_run(run, 2, tasks=TASKS, out_dir=tmp_path / "out", samples=1, limit=None,
                                     concurrency=None, resume=False)
    assert config.inference.model == "/models/base"
    assert config.inference.lora_adapter == str(run / "exports" / "global_step_2")
    result = CliRunner().invoke(app, ["eval", str(TASKS), "--from-run", str(run), "--lora", str(run)])
    assert isinstance(result.exception, ConfigError) and "drop --lora" in str(result.exception)


@pytest.mark.parametrize("lora", [None, {"rank": 8}], ids=["full", "lora"])
def test_step_0_is_the_runs_initial_model_with_the_same_settings(tmp_path, lora):
    run = _fake_run(tmp_path, [0.0, 0.5], exports=[2])
    cfg = TrainConfig.model_validate({**RUN, "model": {"path": "/models/base", "device": "cpu", "lora": lora}})
    (run / "config.yaml").write_text(cfg.to_yaml())
    assert resolve_export(run, 0) == (0, None, "--step 0: the initial policy")
    base, which = eval_config_from_run(run, 0, tasks=TASKS, out_dir=tmp_path / "a", samples=2, limit=None,
                                       concurrency=None, resume=False)
    final, _ = eval_config_from_run(run, 2, tasks=TASKS, out_dir=tmp_path / "b", samples=2, limit=None,
                                    concurrency=None, resume=False)
    assert base.inference.model == "/models/base" and base.inference.lora_adapter is None
    assert which == f"step 0 of {run} (--step 0: the initial policy): /models/base"
    # Everything but the weights is the same as for a trained step's export.
    assert base.agent == final.agent and base.concurrency == final.concurrency
    strip = {"model": None, "lora_adapter": None}
    assert base.inference.model_copy(update=strip) == final.inference.model_copy(update=strip)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("lora", [None, {"rank": 4, "alpha": 8.0}], ids=["full", "lora"])
def test_eval_from_run_evaluates_the_export_with_the_runs_limits(tmp_path, tiny_model_dir, lora):
    cfg = TrainConfig.model_validate({**RUN, "model": {"path": str(tiny_model_dir), "device": "cpu", "lora": lora}})
    run = tmp_path / "run"
    train(cfg, run)
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["eval", str(TASKS), "--from-run", str(run), "--step", "1", "-k", "2",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    export = run / "exports" / "global_step_1"
    assert summary["model"] == (f"{tiny_model_dir} + LoRA {export}" if lora else str(export))
    assert summary["protocol"] == "single-turn" and summary["num_trajectories"] == 8  # 4 tasks x 2
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    # the eval command's defaults would allow 1024 tokens per turn and 50 terminus turns
    assert all(0 < r["generated_tokens"] <= 4 and r["num_turns"] == 1 for r in records), records
