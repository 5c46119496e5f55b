"""The whole loop on real parts: a tiny model, the learning tasks in real Docker sandboxes, the
real verifier. Resume equality, finished runs, zero-step runs, run-directory contents."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from swerl.cli import app
from swerl.errors import ConfigError
from swerl.selection import select_checkpoint
from swerl.trainer.persistence import checkpoint as ckpt
from swerl.trainer.config import TrainConfig
from swerl.trainer.loop import train

from ._support import tiny_run_config

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "examples" / "learning_tasks"

SPEC_METRICS = [
    "reward/avg_raw_reward", "reward/avg_pass_at_n", "advantage/zero_variance_groups", "advantage/below_min_groups",
    "advantage/excluded_rows", "advantage/mean_abs", "tis/imp_ratio_mean", "tis/imp_ratio_capped_fraction",
    "tis/log_ratio_abs_mean", "tis/rows_without_logprobs", "policy/clip_fraction", "loss/policy", "grad_norm", "lr",
    "response_length/mean", "response_length/max", "response_length/clip_fraction",
    "response_length/reward_pos_mean", "response_length/reward_zero_mean", "turns/mean", "tokens/generated",
    "failure_class/none", "timing/rollout_s", "timing/update_s", "timing/step_s",
    "sandbox/pool_hit_rate", "sandbox/container_wait_s",
]


LORA = {"rank": 4, "alpha": 8.0}
"""The tiny model's LoRA adapters (every linear of its 2 layers)."""


def tiny_config(model_dir: Path, lora: dict | None = None, **loop) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"path": str(model_dir), "device": "cpu", "lora": lora},
        "data": {"tasks": str(TASKS)},
        "agent": {"protocol": "single-turn", "temperature": 1.0,
                  "limits": {"max_new_tokens_per_turn": 6, "context_window_tokens": 256, "max_turns": 1}},
        "sandbox": {"concurrency": 4},
        "generator": {"max_batch_size": 1},  # one prompt per forward: samples independent of batching
        "algorithm": {"n_samples_per_prompt": 4, "min_group_size": 2, "loss_reduction": "seq_mean_token_sum_norm_global",
                      "max_seq_len": 256},
        "optimizer": {"lr": 1e-2},
        "loop": {"train_batch_size": 2, "epochs": 2, "max_steps": 3, "micro_batch_size": 3, **loop},
        "checkpointing": {"ckpt_interval": 1, "hf_save_interval": 1, "keep_last": 5},
        "logging": {"dump_trajectories": True, "tensorboard": True},
        "seed": 3,
    })


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def without_timing(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(("timing/", "async/busy", "sandbox/"))}


def test_zero_planned_steps_is_refused_before_any_file(tmp_path, tiny_model_dir):
    cfg = tiny_config(tiny_model_dir, train_batch_size=5)  # 4 tasks < one batch
    with pytest.raises(ConfigError, match="the plan trains 0 steps: 4 tasks"):
        train(cfg, tmp_path / "run")  # train() without a preflight runs it
    assert not (tmp_path / "run").exists()


@pytest.mark.docker
def test_swerl_train_reads_each_task_once(tmp_path, tiny_model_dir, monkeypatch):
    """The run starts from what its preflight loaded: every task folder (training and held-out)
    is read once by the real loader, not once by the preflight and again by ``train()``."""
    from swerl.tasks import load as task_load

    read, real = [], task_load.load_task

    def counted(path, **kwargs):  # noqa: ANN001, ANN003
        read.append(Path(path).name)
        return real(path, **kwargs)

    monkeypatch.setattr(task_load, "load_task", counted)
    config = tiny_run_config(tiny_model_dir, loop={"train_batch_size": 2, "max_steps": 1, "micro_batch_size": 4},
                             eval={"tasks": str(TASKS), "names": ["magic-a"]}, logging={"tensorboard": False})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["train", str(path), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    # Once for the training source, once for the held-out source (the loader reads each of its
    # folders to match eval.names); a second load by train() would double both.
    assert sorted(read) == sorted(["magic-a", "magic-b", "magic-c", "magic-d"] * 2)
    assert len(records(tmp_path / "run")) == 1


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("lora", [None, LORA], ids=["full", "lora"])
def test_resume_reproduces_the_uninterrupted_run(tmp_path, tiny_model_dir, lora):
    cfg = tiny_config(tiny_model_dir, lora)
    full = tmp_path / "full"
    result = train(cfg, full)
    assert result.steps_trained == 3 and result.last_step == 3

    # Run directory: config, one record per step with the names of docs/metrics.md, checkpoints, exports, dumps.
    recs = records(full)
    assert [r["global_step"] for r in recs] == [1, 2, 3]
    missing = [k for k in SPEC_METRICS if k not in recs[0]]
    assert not missing, missing
    assert all(0.0 <= r["sandbox/pool_hit_rate"] <= 1.0 and r["sandbox/container_wait_s"] > 0 for r in recs)
    assert TrainConfig.model_validate(__import__("yaml").safe_load((full / "config.yaml").read_text())) == cfg
    assert sorted(p.name for p in (full / "exports").iterdir()) == ["global_step_1", "global_step_2", "global_step_3"]
    weights = {"adapter_model.safetensors", "adapter_config.json"} if lora else {"model.safetensors", "config.json"}
    assert weights <= {p.name for p in (full / "exports" / "global_step_3").iterdir()}
    chosen = select_checkpoint(full, span=2, interval=1).chosen  # over adapter exports too
    assert chosen is not None and weights <= {p.name for p in Path(chosen.export_path).iterdir()}
    assert len((full / "trajectories" / "step_2.jsonl").read_text().splitlines()) == 8
    assert list((full / "tensorboard").glob("events.*"))

    # Crash after step 2: the checkpoint and export of step 3 never got written.
    crashed = tmp_path / "crashed"
    shutil.copytree(full, crashed)
    shutil.rmtree(crashed / "checkpoints" / "global_step_3")
    shutil.rmtree(crashed / "exports" / "global_step_3")
    (crashed / "checkpoints" / "latest_ckpt_global_step.txt").write_text("2\n")
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        train(cfg, crashed)
    resumed = train(cfg, crashed, resume="latest")
    assert resumed.steps_trained == 1 and resumed.last_step == 3
    assert [r["global_step"] for r in records(crashed)] == [1, 2, 3]
    # Same data order, same samples, same losses, same weights.
    assert without_timing(records(crashed)[2]) == without_timing(recs[2])
    a = ckpt.read_model_state(full / "checkpoints" / "global_step_3")
    b = ckpt.read_model_state(crashed / "checkpoints" / "global_step_3")
    assert all(torch.equal(a[k], b[k]) for k in a)

    # Resuming a finished run says so, trains nothing and exits 0.
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(cfg.to_yaml())
    out = CliRunner().invoke(app, ["train", str(cfg_path), "--run-dir", str(crashed), "--resume", "latest"])
    assert out.exit_code == 0, out.output
    assert "already finished at global step 3" in out.output
    assert len(records(crashed)) == 3


@pytest.mark.docker
@pytest.mark.slow
def test_background_checkpoints_and_exports_commit_what_the_foreground_run_writes(tmp_path, tiny_model_dir):
    """checkpointing.async_save=true on CPU (auto would say false): every checkpoint and export is
    committed by the end, with the same bytes and records as the foreground run's."""
    fg, bg = tmp_path / "fg", tmp_path / "bg"
    train(tiny_config(tiny_model_dir, max_steps=2), fg)
    cfg = tiny_config(tiny_model_dir, max_steps=2)
    cfg = cfg.model_copy(update={"checkpointing": cfg.checkpointing.model_copy(update={"async_save": True})})
    result = train(cfg, bg)
    assert result.steps_trained == 2
    assert [without_timing(r) for r in records(bg)] == [without_timing(r) for r in records(fg)]
    assert (bg / "checkpoints" / "latest_ckpt_global_step.txt").read_text() == "2\n"
    assert sorted(p.name for p in (bg / "checkpoints").iterdir()) == sorted(p.name for p in (fg / "checkpoints").iterdir())
    for step in (1, 2):
        a = ckpt.read_model_state(fg / "checkpoints" / f"global_step_{step}")
        b = ckpt.read_model_state(bg / "checkpoints" / f"global_step_{step}")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        export = f"exports/global_step_{step}/model.safetensors"
        assert (bg / export).read_bytes() == (fg / export).read_bytes()
