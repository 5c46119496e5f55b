"""The colocation model on GPU: an in-process engine shares the rank's GPU and sleeps during the
update, so it cannot serve async rollouts; servers on GPUs of their own can. The config refuses
the impossible mix in one line (at load for ``device: cuda``, at start for ``auto``), and the
dry-run shows what each phase holds in GPU memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from swerl.errors import ConfigError
from swerl.trainer.config import TrainConfig, load_train_config
from swerl.trainer.rollouts.generator import check_colocation
from swerl.trainer.setup.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
SEED_YAML = ROOT / "examples" / "rloo-seqnorm-tis-qwen3-8b.yaml"
QWEN3_8B = {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "tie_word_embeddings": False}
COLOCATED = {"vllm_mode": "inprocess", "gpu_memory_utilization": 0.5, "enable_sleep_mode": True}


def seed(generator: dict | None = None, model: dict | None = None, **loop) -> TrainConfig:
    """The seed example with ``generator`` fields instead of its servers', and ``model``/``loop`` fields set."""
    data = yaml.safe_load(SEED_YAML.read_text())
    if generator is not None:
        data["generator"].pop("num_servers")
        data["generator"].update(generator)
    data["model"].update(model or {})
    data["loop"].update(loop)
    return TrainConfig.model_validate(data)


def test_a_colocated_engine_with_async_rollouts_is_refused_with_the_fixes():
    with pytest.raises(ValidationError, match=r"loop.max_staleness_steps=16 generates while the trainer updates, but "
                       r"generator.vllm_mode=inprocess shares each rank's GPU.*fix: set loop.max_staleness_steps=0"):
        seed(COLOCATED)
    assert seed(COLOCATED, max_staleness_steps=0).generator.enable_sleep_mode  # synchronous: it sleeps, fine
    with pytest.raises(ConfigError, match="enable_sleep_mode=true is read by an in-process engine only"):
        load_train_config(SEED_YAML, ["generator.enable_sleep_mode=true"])


def test_device_auto_is_checked_when_the_run_meets_its_gpu():
    cfg = seed(COLOCATED, model={"device": "auto"})  # auto: cannot know at load
    check_colocation(cfg, on_cpu=True)  # on CPU an in-process engine may generate during the update
    with pytest.raises(ConfigError, match="generator.vllm_mode=inprocess shares each rank's GPU"):
        check_colocation(cfg, on_cpu=False)


def test_the_dry_run_shows_the_gpu_memory_of_both_phases(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    separate = dict(make_plan(load_train_config(SEED_YAML, [f"model.path={tmp_path}"]), 5000).placement)
    assert separate["GPU memory, trainer GPU"] == "trainer state 16.4 GB + activations, in both phases (generation elsewhere)"
    assert separate["GPU memory, generation GPUs"].startswith("1 GPU(s) of their own per rank: vLLM 0.9 of the GPU "
                                                              "(16.4 GB bf16 weights + KV cache), generating during")
    colocated = dict(make_plan(seed(COLOCATED, {"path": str(tmp_path)}, max_staleness_steps=0), 5000).placement)
    assert colocated["GPU memory, rollouts (colocated)"].startswith("vLLM 0.5 of the GPU (16.4 GB bf16 weights + KV")
    assert colocated["GPU memory, update (colocated)"] == ("trainer state 16.4 GB + activations + vLLM asleep: weights "
                                                           "and KV cache freed, re-written by the weight sync")
    awake = dict(make_plan(seed({**COLOCATED, "enable_sleep_mode": False}, {"path": str(tmp_path)},
                                max_staleness_steps=0), 5000).placement)
    assert "vLLM still holds 0.5 of the GPU" in awake["GPU memory, update (colocated)"]
