"""The size of a policy without loading it: its HF ``config.json`` (shape), its parameter count
from the safetensors headers or from the shape, the parameters of LoRA adapters on it, and the KV
cache of one token. What the run plan and the preflight size memory, disk and sync with.
"""

from __future__ import annotations

import json
import math
from pathlib import Path


def model_shape(path: str | None) -> dict | None:
    """The HF ``config.json`` of ``model.path`` when it is a readable folder (no model load), else None."""
    if path is None or not (Path(path) / "config.json").is_file():
        return None
    try:
        return json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None


def model_folder_now(path: str | None) -> tuple[Path | None, str]:
    """The HF folder ``model.path`` stands for right now, converting nothing, and what it is.

    Returns: (folder or None, label): an HF folder as given; the cached conversion of a ``.gguf``
    or of the default model (``model.path: null``) once converted, else None with a label saying
    that the first run converts it. No weights are read.
    """
    from swerl.errors import SwerlError
    from swerl.inference.model_files import converted_dir, default_gguf_path

    if path is not None and not path.endswith(".gguf"):
        return Path(path), "model.path"
    name = "default model" if path is None else f"{Path(path).name}"
    try:
        gguf = default_gguf_path() if path is None else Path(path).expanduser()
        folder = converted_dir(gguf) if gguf.is_file() else None
    except (SwerlError, OSError):
        return None, f"{name} not installed"
    if folder is None or not (folder / "config.json").is_file():
        return None, f"{name}, converted at the first run"
    return folder, name


def exact_param_count(folder: Path) -> int | None:
    """Parameters stored in the ``*.safetensors`` files of ``folder``, from their JSON headers
    (8-byte little-endian length, then ``{name: {dtype, shape, data_offsets}}``); no tensor is
    read. None when the folder has no safetensors file or a header is unreadable."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    try:
        for file in files:
            with open(file, "rb") as handle:
                header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
            total += sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return total


def model_size(path: str | None) -> tuple[dict | None, int | None, str]:
    """(HF config, parameter count, label) of ``model.path`` now: the count from the safetensors
    headers, else from the config (:func:`param_count`); (None, None, why) when no folder is there yet."""
    folder, label = model_folder_now(path)
    shape = model_shape(str(folder)) if folder is not None else None
    if shape is None:
        return None, None, label if folder is None else f"{folder} not readable now"
    return shape, exact_param_count(folder) or param_count(shape), label


def param_count(shape: dict) -> int:
    """Parameters of a Llama/Qwen-style decoder from its config (embeddings, attention, MLP, norms)."""
    d, layers, vocab = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]
    heads = shape["num_attention_heads"]
    head_dim = shape.get("head_dim") or d // heads
    kv = shape.get("num_key_value_heads", heads)
    attn = d * heads * head_dim * 2 + d * kv * head_dim * 2
    mlp = 3 * d * shape["intermediate_size"]
    embed = vocab * d * (1 if shape.get("tie_word_embeddings") else 2)
    return layers * (attn + mlp + 2 * d) + embed + d


def lora_param_count(shape: dict, targets: str | list[str], rank: int) -> int:
    """Adapter parameters of a Llama/Qwen-style decoder: r x (in + out) per targeted linear
    (``all-linear``: q, k, v, o, gate, up, down of every layer; ``lm_head`` only when named)."""
    d, heads, inter = shape["hidden_size"], shape["num_attention_heads"], shape["intermediate_size"]
    head_dim = shape.get("head_dim") or d // heads
    kv = shape.get("num_key_value_heads", heads)
    dims = {"q_proj": (d, heads * head_dim), "k_proj": (d, kv * head_dim), "v_proj": (d, kv * head_dim),
            "o_proj": (heads * head_dim, d), "gate_proj": (d, inter), "up_proj": (d, inter), "down_proj": (inter, d)}
    names = list(dims) if targets == "all-linear" else [name for name in targets if name in dims]
    head = rank * (d + shape["vocab_size"]) if targets != "all-linear" and "lm_head" in targets else 0
    return shape["num_hidden_layers"] * sum(rank * sum(dims[name]) for name in names) + head


def kv_bytes_per_token(shape: dict, dtype_bytes: int = 2) -> int:
    """K and V of one token over all layers, bf16."""
    heads = shape["num_attention_heads"]
    head_dim = shape.get("head_dim") or shape["hidden_size"] // heads
    return 2 * shape["num_hidden_layers"] * shape.get("num_key_value_heads", heads) * head_dim * dtype_bytes
