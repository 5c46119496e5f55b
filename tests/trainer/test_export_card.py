"""HF exports describe themselves: a model card, a real tokenizer model_max_length, readable modes."""

from __future__ import annotations

import json
import stat

import yaml

from swerl.trainer import checkpoint as ckpt
from swerl.trainer.config import load_train_config
from swerl.trainer.distributed import DistInfo

from ._support import build_tiny_model, build_tiny_tokenizer

DEMO = "examples/humaneval-smollm2-cpu.yaml"


def _export(tmp_path, umask: int = 0o077):
    import os

    cfg = load_train_config(DEMO, ["model.path=/models/base-sft"])
    (tmp_path / "config.yaml").write_text(cfg.to_yaml())
    model, tok = build_tiny_model(16, 3), build_tiny_tokenizer()
    old = os.umask(umask)  # a private umask must not leak into the export
    try:
        return ckpt.export_hf(tmp_path, 7, model, tok, DistInfo(),
                              metrics={"reward/avg_raw_reward": 0.375, "loss/policy": -0.0123, "timing/step_s": 4.5})
    finally:
        os.umask(old)


def test_export_has_a_model_card_with_base_model_step_metrics_and_config(tmp_path):
    card = (_export(tmp_path) / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["base_model"] == "/models/base-sft" and front["library_name"] == "transformers"
    assert "# swerl export: global step 7" in card
    assert "| `reward/avg_raw_reward` | 0.375 |" in card and "| `loss/policy` | -0.0123 |" in card
    assert card.index("reward/avg_raw_reward") < card.index("loss/policy")  # key metrics first
    assert "timing/step_s" not in card  # wall-clock figures differ between a run and its resumed twin
    assert "train_batch_size:" in card and "rloo_n advantages" in card


def test_export_tokenizer_config_has_the_models_max_length_not_1e30(tmp_path):
    path = _export(tmp_path)
    tokenizer_config = json.loads((path / "tokenizer_config.json").read_text())
    model_config = json.loads((path / "config.json").read_text())
    assert tokenizer_config["model_max_length"] == model_config["max_position_embeddings"]


def test_export_files_are_0644_and_folders_0755_under_a_private_umask(tmp_path):
    path = _export(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.rglob("*") if p.is_file()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes
