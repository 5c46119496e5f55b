"""LoRA weight sync to vLLM engines: only the adapters travel. Every version is a peft adapter folder
(``adapter_config.json`` + ``adapter_model.safetensors``, what ``PeftModel.save_pretrained`` writes)
in a fresh folder (``disk.publish_folder``: ``ROOT/v000012-3f9a1c/``), and the engines take it as
a NEW adapter: a new name (``swerl-lora-v000012-3f9a1c``) and, in process, a new ``lora_int_id``.

Why a new adapter per version and not ``load_inplace`` on one name: vLLM's prefix cache keys a
block by the adapter's name and path (``kv_cache_utils._gen_lora_extra_hash_keys``), so blocks of
the old adapter can never be reused for the new one, and no persisted in-place flag re-reads the
disk at every request (vllm#36373). The previous adapter is dropped once the new one is loaded.
The frozen base is never rewritten, so a colocated engine sleeps at level 1 only (level 2 discards
the base weights, which nothing would load again: ``sleep_level``).
"""

from __future__ import annotations

import copy
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from swerl.inference.gather import full_tensor
from swerl.inference.weight_sync.base import Staged, WeightSync
from swerl.inference.weight_sync.disk import publish_folder, run_token

if TYPE_CHECKING:
    from swerl.inference.engines.vllm_backend import VLLMBackend
    from swerl.inference.engines.vllm_server import VLLMServerBackend

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


def adapter_tensors(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The trainable tensors of a peft ``model``, full and in ``dtype`` on CPU, peft's file names
    (``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight``: the adapter name dropped).

    Collective under FSDP (every rank gathers each adapter shard, cast first); the adapters are small
    (r x (in + out) per targeted linear), so every rank holds all of them for a moment.
    """
    from peft import get_peft_model_state_dict

    full: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        full[name] = full_tensor(param.detach().to(dtype)).cpu().contiguous()
    return get_peft_model_state_dict(model, state_dict=full)


def write_adapter(model: torch.nn.Module, folder: Path, dtype: torch.dtype, base_path: str | None,
                  is_main: bool = True) -> int:
    """Collective: gather ``model``'s adapters (:func:`adapter_tensors`); ``is_main`` writes them into
    ``folder`` as a peft adapter folder (``PeftModel.from_pretrained`` and vLLM's ``LoRARequest`` load it).

    Args:
        base_path: the base model's folder, written as ``base_model_name_or_path``.
    Returns:
        bytes of the adapter tensors.
    """
    from safetensors.torch import save_file

    tensors = adapter_tensors(model, dtype)
    if is_main:
        folder.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(folder / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        config = copy.copy(model.peft_config["default"])
        config.inference_mode = True
        config.base_model_name_or_path = base_path or config.base_model_name_or_path
        config.save_pretrained(str(folder))  # peft's own adapter_config.json
    return sum(t.numel() * t.element_size() for t in tensors.values())


def adapter_rank(folder: str | Path) -> int:
    """The rank ``r`` an adapter folder was trained with (its ``adapter_config.json``).

    Raises:
        ValueError: the folder has no readable adapter config.
    """
    try:
        return int(json.loads((Path(folder) / ADAPTER_CONFIG).read_text())["r"])
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{folder} is not a peft adapter folder ({ADAPTER_CONFIG} unreadable: {err})") from err


class AdapterSync(WeightSync):
    """vLLM engines taking a new LoRA adapter per version; the base weights never move.

    Args:
        engines: every engine this rank generates with; owned: indices of those it loads and probes.
        root: the folder every engine can read (``generator.weight_sync_dir``).
        dtype: the engines' dtype (the adapter is cast to it before any gather).
        base_path: the base model's folder (written into each adapter's config).
        shared: the engines serve other ranks too (sets ``drain_all_ranks``).
    """

    sleep_level = 1
    # A request names its adapter: frozen across a switch it would go on with the old one, which the
    # engine reloads from a folder the new version retired (a fatal engine error, measured on vLLM 0.32).
    keeps_requests = False

    def __init__(self, engines: list[VLLMBackend | VLLMServerBackend], owned: list[int], root: Path,
                 dtype: torch.dtype, base_path: str | None, shared: bool = False) -> None:
        self.engines, self.owned, self.root, self.dtype = list(engines), list(owned), Path(root), dtype
        self.base_path, self.drain_all_ranks = base_path, shared
        self._token = run_token()
        self._threads = ThreadPoolExecutor(max_workers=max(1, len(self.owned)), thread_name_prefix="swerl-adapter")

    def check(self) -> None:
        for index in self.owned:
            self.engines[index].check_adapter_api()

    def stage(self, model: torch.nn.Module, version: int) -> Staged:
        start = time.monotonic()

        def fill(tmp: Path, rank: int, world: int) -> int:
            return write_adapter(model, tmp, self.dtype, self.base_path, is_main=rank == 0)

        folder, num_bytes = publish_folder(self.root, version, self._token, fill)
        return Staged(version, folder, time.monotonic() - start, num_bytes)

    def apply(self, staged: Staged) -> None:
        """Owners load the version's adapter (then drop the previous one); every engine samples with it."""
        assert staged.folder is not None
        name = f"swerl-lora-{staged.folder.name}"
        futures = [self._threads.submit(self.engines[i].load_adapter, name, str(staged.folder), staged.version)
                   for i in self.owned]
        for future in futures:
            future.result()
        for index, engine in enumerate(self.engines):
            if index not in self.owned:
                engine.use_adapter(name, staged.version)

    def probe_engines(self) -> list[Any]:
        return [self.engines[i] for i in self.owned]

    def close(self) -> None:
        self._threads.shutdown(wait=False)
