"""The weight-sync interface: how the trainer's weights reach one rank's generator after an
optimizer step. One implementation per way the weights travel; the run picks it by the type of
generator backend it built (``swerl.trainer.rollouts.generator.attach_sync``), never by probing attributes.

| class | engines | what travels |
|---|---|---|
| ``ModuleShare`` | ``HFBackend`` on the live policy | nothing: the engine samples with the trainer's module |
| ``ModuleCopy`` | ``HFBackend`` on its own copy (the rollout producer) | a state-dict snapshot, copied in place |
| ``DiskReload`` | ``VLLMBackend``, an ``EnginePool`` of servers | bf16 safetensors shards, a fresh folder per version |
| ``NcclBroadcast`` | an ``EnginePool`` of GPU servers | bf16 tensors over one NCCL group per server |
| ``AdapterSync`` | ``VLLMBackend``, an ``EnginePool`` of servers, with ``model.lora`` | the peft adapter folder, a new adapter per version |

Every rank makes the same calls in the same order, once per optimizer step:

1. :meth:`WeightSync.stage` (collective over the trainer ranks): produce what the engines will
   load. The engines keep generating meanwhile.
2. :meth:`WeightSync.apply`, with no request in flight on this rank's engines (the caller drains
   them; with :attr:`WeightSync.drain_all_ranks` every rank drains before any rank applies): the
   engines this rank owns load the version and drop their prefix cache; every engine this rank
   generates with carries the version from then on.
3. The parity probe on :meth:`WeightSync.probe_engines` (the caller; an empty list is fine).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch


@dataclass(frozen=True)
class Staged:
    """What :meth:`WeightSync.stage` produced for one version.

    Attributes:
        version: the policy version (the optimizer steps taken) the engines will hold.
        folder: where the weights were written (disk, adapters); None when nothing is written.
        stage_s: seconds the stage took on this rank (writing, gathering), for the metrics.
        num_bytes: bytes of the version as shipped to one engine (every weight in the engine dtype, or
            the adapters); 0 when nothing travels. ``inference/weight_sync_bytes``.
    """

    version: int
    folder: Path | None = None
    stage_s: float = 0.0
    num_bytes: int = 0


def owned_indices(num_engines: int, rank: int, world_size: int, shared: bool) -> list[int]:
    """Indices of the engines this rank reloads and probes.

    Args:
        num_engines: engines this rank generates with.
        shared: True when every rank generates with the same engines (``server_urls``): engine i
            then has one owner, rank ``i % world_size``, and a rank past the last engine owns none.
            False (each rank's own engines): this rank owns all of them.
    """
    if not shared:
        return list(range(num_engines))
    return [index for index in range(num_engines) if index % world_size == rank]


class WeightSync(ABC):
    """Trained weights into one rank's generation engines; see the module docstring for the calls.

    Attributes:
        sleep_level: the deepest vLLM sleep level a colocated engine may take during the update
            such that :meth:`apply` restores it: 2 (weights discarded) when every weight is
            rewritten, 1 (weights kept in host memory) when only part of them is (adapters).
        drain_all_ranks: True when engines this rank reloads also serve other ranks' requests
            (shared servers): every rank must drain its own requests before any rank applies.
        keeps_requests: requests in flight may be frozen across :meth:`apply` and go on under the
            weights it loaded (the engine's weights are rewritten in place); False when a request
            names what it samples with (an adapter), so it would go on under the old version,
            whose files the next version retires: the update then waits for them instead.
    """

    sleep_level: ClassVar[int] = 2
    drain_all_ranks: bool = False
    keeps_requests: ClassVar[bool] = True

    def check(self) -> None:
        """At start: the APIs this sync needs exist (installed vLLM, the servers' routes).

        Raises:
            EnvironmentProblem: one line naming what is missing and the fix.
        """

    @abstractmethod
    def stage(self, model: torch.nn.Module, version: int) -> Staged:
        """Collective over the trainer ranks: prepare ``model``'s current weights as ``version``.

        Args:
            model: the trainer's policy (replicated or FSDP-sharded), HF parameter names.
        """

    @abstractmethod
    def apply(self, staged: Staged) -> None:
        """Make this rank's engines hold ``staged.version`` (no request may be in flight on them).

        Raises:
            InferenceError: an engine refused the weights or its prefix-cache reset.
        """

    @abstractmethod
    def probe_engines(self) -> list:
        """The engines this rank probes after :meth:`apply` (``GenerationBackend`` s it owns)."""

    def close(self) -> None:
        """Release what the sync holds (NCCL groups, written folders it owns)."""
