"""Disk weight sync for vLLM engines (CPU and GPU, in process or servers): every trainer rank
writes its share of the weights, cast to the engine dtype BEFORE any gather, into a fresh folder
per version; each engine's owner rank reloads that folder in place (swerl's worker extension:
``reload_weights`` + tied-head re-pack) and resets the prefix cache.

Layout: ``ROOT/v000012-3f9a1c/model-00001-of-00008.safetensors`` ... one shard per rank (tensor j
goes to rank ``j % W``), written under ``ROOT/.tmp-v000012-3f9a1c/`` and renamed by rank 0 once
every rank has written. A name is never reused (the suffix is drawn once per run incarnation),
so an engine on NFS never reads a stale cached file; folders of older versions are removed at
the next stage, when no engine reads them any more (the root belongs to one run: every folder
named like a version in it is removed then).
"""

from __future__ import annotations

import logging
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as tdist

from swerl.fileio import atomic_write
from swerl.inference.gather import full_tensor
from swerl.inference.weight_sync.base import Staged, WeightSync

if TYPE_CHECKING:
    from swerl.inference.engines.vllm_backend import VLLMBackend
    from swerl.inference.engines.vllm_server import VLLMServerBackend

log = logging.getLogger(__name__)

WEIGHTS_FILE = "model.safetensors"
VERSION_NAME = re.compile(r"^(\.tmp-)?v\d{6}-[0-9a-f]{6}$")
"""Names of the folders this module writes (the only entries of the root it removes)."""


def _distributed() -> bool:
    return tdist.is_available() and tdist.is_initialized() and tdist.get_world_size() > 1


def _barrier() -> None:
    if _distributed():
        tdist.barrier()


def untied_state_dict(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``state`` cast to ``dtype``, contiguous, with tensors that share storage kept once (the first
    name wins, as in ``save_pretrained``: a tied ``lm_head.weight`` goes, ``embed_tokens`` stays)."""
    seen: set[int] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        key = tensor.untyped_storage().data_ptr() if tensor.numel() else id(tensor)
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().to("cpu", dtype).contiguous()
    return out


def write_weights(state: dict[str, torch.Tensor], folder: Path, dtype: torch.dtype, version: int) -> Path:
    """Write a full ``state`` (HF names) as ``folder/model.safetensors`` atomically (one process;
    tests and benches restore an engine's weights with it).

    Returns:
        ``folder`` (what ``reload_weights`` takes).
    """
    from safetensors.torch import save_file

    tensors, metadata = untied_state_dict(state, dtype), {"format": "pt", "weight_version": str(version)}
    atomic_write(folder / WEIGHTS_FILE, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
    return folder


def iter_engine_tensors(model: torch.nn.Module, dtype: torch.dtype) -> Iterator[tuple[int, str, torch.Tensor]]:
    """``(index, HF name, full tensor in dtype)`` over the model's state dict, tied weights once.

    Each tensor is cast to ``dtype`` where it lives (an FSDP shard is cast locally), THEN
    all-gathered: a bf16 engine costs half the bytes of an fp32 gather. Collective under FSDP:
    every rank must exhaust the iterator in the same order; at most one gathered tensor is alive.
    A weight tied to an earlier one (same storage, shape and dtype: SmolLM2's ``lm_head.weight``)
    is skipped, as ``save_pretrained`` does; vLLM ties it again.
    """
    from torch.distributed.tensor import DTensor

    seen: set[tuple[int, tuple[int, ...], torch.dtype]] = set()
    index = 0
    for name, value in model.state_dict().items():
        local = value.to_local() if isinstance(value, DTensor) else value
        key = (local.data_ptr(), tuple(value.shape), value.dtype)
        if local.numel() and key in seen:
            continue
        seen.add(key)
        yield index, name, full_tensor(value.detach().to(dtype))
        index += 1


def version_folder(root: Path, version: int, token: str) -> Path:
    """``ROOT/v{version:06d}-{token}``: the folder version ``version`` is written to."""
    return root / f"v{version:06d}-{token}"


def write_version(model: torch.nn.Module, root: Path, version: int, dtype: torch.dtype, token: str) -> tuple[Path, int]:
    """Collective: every rank writes its shard of ``model``'s weights for ``version`` (module docstring).

    Returns:
        (the version's folder, complete on every rank when this returns; bytes of the whole version).
    """
    from safetensors.torch import save_file

    def fill(tmp: Path, rank: int, world: int) -> int:
        mine, total = {}, 0
        for index, name, tensor in iter_engine_tensors(model, dtype):
            total += tensor.numel() * tensor.element_size()
            if index % world == rank:
                mine[name] = tensor.to("cpu").contiguous()
        metadata = {"format": "pt", "weight_version": str(version)}
        save_file(mine, str(tmp / f"model-{rank + 1:05d}-of-{world:05d}.safetensors"), metadata=metadata)
        return total

    return publish_folder(root, version, token, fill)


def publish_folder(root: Path, version: int, token: str, fill: Callable[[Path, int, int], int]) -> tuple[Path, int]:
    """Collective: the fresh folder of ``version`` under ``root``, filled by ``fill(tmp, rank, world)``
    on every rank (it returns the bytes of the version), renamed by rank 0 once every rank has filled
    it; the folders of older versions are removed (every rank applied them before this stage).

    Returns:
        (the version's folder, complete on every rank when this returns; what ``fill`` returned).
    """
    rank, world = (tdist.get_rank(), tdist.get_world_size()) if _distributed() else (0, 1)
    final = version_folder(root, version, token)
    tmp = root / f".tmp-{final.name}"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier()
    num_bytes = fill(tmp, rank, world)
    _barrier()
    if rank == 0:
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in root.iterdir():
            if old != final and VERSION_NAME.match(old.name):
                shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return final, num_bytes


def run_token() -> str:
    """A folder-name suffix drawn once per run incarnation on rank 0, the same on every rank."""
    box = [secrets.token_hex(3)]
    if _distributed():
        tdist.broadcast_object_list(box, src=0)
    return box[0]


class DiskReload(WeightSync):
    """vLLM engines reloading a fresh safetensors folder per version.

    Args:
        engines: every engine this rank generates with (one ``VLLMBackend``, or the servers of an
            ``EnginePool``); all of them carry the version after :meth:`apply`.
        owned: indices of the engines this rank reloads and probes (``owned_indices``).
        root: the folder every engine can read (``generator.weight_sync_dir``).
        dtype: the engines' dtype; tensors are cast to it before they are gathered.
        shared: the engines serve other ranks too (sets ``drain_all_ranks``).
    """

    def __init__(self, engines: list[VLLMBackend | VLLMServerBackend], owned: list[int], root: Path,
                 dtype: torch.dtype, shared: bool = False) -> None:
        self.engines, self.owned, self.root, self.dtype = list(engines), list(owned), Path(root), dtype
        self.drain_all_ranks = shared
        self._token = run_token()
        self._threads = ThreadPoolExecutor(max_workers=max(1, len(self.owned)), thread_name_prefix="swerl-reload")

    def check(self) -> None:
        for index in self.owned:
            self.engines[index].check_reload_api()

    def stage(self, model: torch.nn.Module, version: int) -> Staged:
        start = time.monotonic()
        folder, num_bytes = write_version(model, self.root, version, self.dtype, self._token)
        return Staged(version, folder, time.monotonic() - start, num_bytes)

    def apply(self, staged: Staged) -> None:
        assert staged.folder is not None
        futures = [self._threads.submit(self.engines[i].reload_weights, str(staged.folder), staged.version)
                   for i in self.owned]
        for future in futures:
            future.result()
        for engine in self.engines:
            engine.weight_version = staged.version

    def probe_engines(self) -> list:
        return [self.engines[i] for i in self.owned]

    def close(self) -> None:
        self._threads.shutdown(wait=False)
