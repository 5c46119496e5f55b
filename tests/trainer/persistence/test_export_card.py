"""HF exports describe themselves: a model card, a real tokenizer model_max_length, readable modes."""

from __future__ import annotations

import json
import stat

import torch
import yaml

from swerl.trainer.persistence import hf_export
from swerl.trainer.config import load_train_config
from swerl.trainer.distributed import DistInfo

from .._support import build_tiny_model, build_tiny_tokenizer

DEMO = "examples/humaneval-smollm2-cpu.yaml"


def _export(tmp_path, umask: int = 0o077):
    import os

    cfg = load_train_config(DEMO, ["model.path=/models/base-sft"])
    (tmp_path / "config.yaml").write_text(cfg.to_yaml())
    model, tok = build_tiny_model(16, 3), build_tiny_tokenizer()
    old = os.umask(umask)  # a private umask must not leak into the export
    try:
        return hf_export.export_hf(tmp_path, 7, model, tok, DistInfo(),
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


def test_a_lora_export_is_a_peft_adapter_folder_with_merged_weights_and_says_so(tmp_path):
    """The round trip of a LoRA export: peft loads the adapter onto the base, transformers loads
    merged/, both compute what the trained policy computes; the card names the folder an adapter."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from swerl.trainer.config import LoraConfig
    from swerl.trainer.policy.lora import add_adapters

    from .._support import save_tiny_model_dir

    base_dir = save_tiny_model_dir(tmp_path / "base", seed=3)
    cfg = load_train_config(DEMO, [f"model.path={base_dir}", "model.lora.rank=4", "checkpointing.export_merged=true"])
    (tmp_path / "config.yaml").write_text(cfg.to_yaml())
    model = add_adapters(AutoModelForCausalLM.from_pretrained(base_dir), LoraConfig(rank=4))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)  # a trained adapter (B starts at 0)
    path = hf_export.export_hf(tmp_path, 5, model, build_tiny_tokenizer(), DistInfo(), metrics={}, merged=True)

    assert {"adapter_config.json", "adapter_model.safetensors", "README.md"} <= {p.name for p in path.iterdir()}
    assert not (path / "config.json").exists()  # not a full model: from_pretrained(path) must not half-load it
    assert json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base_dir)
    ids = torch.tensor([[6, 7, 8, 9, 10, 11]])
    with torch.no_grad():
        expected = model(ids).logits
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), path)(ids).logits
        merged = AutoModelForCausalLM.from_pretrained(path / "merged")(ids).logits
    torch.testing.assert_close(loaded, expected, rtol=0, atol=0)
    torch.testing.assert_close(merged, expected, rtol=1e-5, atol=1e-5)
    card = (path / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["library_name"] == "peft" and front["base_model"] == str(base_dir)
    assert "peft LoRA adapter** (rank 4" in card and "`merged/` holds the base with this adapter merged in" in card
