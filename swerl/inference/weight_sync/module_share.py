"""Weight sync for the HF backend, which holds a torch module in the trainer's process: share the
trainer's module itself (nothing travels), or copy a snapshot into the backend's own module (the
rollout producer's copy, which must not change under a running generate call)."""

from __future__ import annotations

import time

import torch

from swerl.inference.backends.hf import HFBackend
from swerl.inference.weight_sync.base import Staged, WeightSync


class ModuleShare(WeightSync):
    """``HFBackend`` generating with the trainer's live module: :meth:`apply` only moves the version.

    Args:
        backend: the backend whose ``model`` is the trainer's module.
    """

    def __init__(self, backend: HFBackend) -> None:
        self.backend = backend

    def stage(self, model: torch.nn.Module, version: int) -> Staged:
        return Staged(version)

    def apply(self, staged: Staged) -> None:
        self.backend.weight_version = staged.version

    def probe_engines(self) -> list:
        return [self.backend]


class ModuleCopy(WeightSync):
    """``HFBackend`` generating with its own copy of the policy (``copy.deepcopy`` of the module).

    :meth:`stage` snapshots the trainer's trainable parameters (a clone: the trainer's tensors change
    at its next step; frozen ones, a LoRA base, never change), :meth:`apply` copies them in place
    into ``module``, the copy the backend generates with (or wraps: a peft copy whose base it samples).

    Args:
        backend: the backend on the copy. module: the copy, named as the trainer's policy
            (default ``backend.model``).
    """

    def __init__(self, backend: HFBackend, module: torch.nn.Module | None = None) -> None:
        self.backend = backend
        self.module = module if module is not None else backend.model
        self._snapshots: dict[int, dict[str, torch.Tensor]] = {}

    def stage(self, model: torch.nn.Module, version: int) -> Staged:
        start = time.monotonic()
        snapshot = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
        self._snapshots = {version: snapshot}
        num_bytes = sum(t.numel() * t.element_size() for t in snapshot.values())
        return Staged(version, stage_s=time.monotonic() - start, num_bytes=num_bytes)

    def apply(self, staged: Staged) -> None:
        snapshot = self._snapshots.pop(staged.version)
        targets = dict(self.module.named_parameters())
        with torch.no_grad():
            for name, tensor in snapshot.items():
                targets[name].copy_(tensor)
        self.backend.weight_version = staged.version

    def probe_engines(self) -> list:
        return [self.backend]
