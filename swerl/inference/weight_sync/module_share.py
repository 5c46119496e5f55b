"""Weight sync for the HF backend, which holds a torch module in the trainer's process: share the
trainer's module itself (nothing travels), or copy a snapshot into the backend's own module (the
rollout producer's copy, which must not change under a running generate call)."""

from __future__ import annotations

import time

import torch

from swerl.inference.hf import HFBackend
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

    :meth:`stage` snapshots the trainer's state dict (a clone: the trainer's tensors change at its
    next step), :meth:`apply` copies it into the backend's module in place.
    """

    def __init__(self, backend: HFBackend) -> None:
        self.backend = backend
        self._snapshots: dict[int, dict[str, torch.Tensor]] = {}

    def stage(self, model: torch.nn.Module, version: int) -> Staged:
        start = time.monotonic()
        self._snapshots = {version: {name: t.detach().clone() for name, t in model.state_dict().items()}}
        return Staged(version, stage_s=time.monotonic() - start)

    def apply(self, staged: Staged) -> None:
        snapshot = self._snapshots.pop(staged.version)
        with torch.no_grad():
            self.backend.model.load_state_dict(snapshot)
        self.backend.weight_version = staged.version

    def probe_engines(self) -> list:
        return [self.backend]
