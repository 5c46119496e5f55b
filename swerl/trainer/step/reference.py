"""The reference policy of the KL term: where log pi_ref of the sampled tokens comes from.

One interface, :class:`ReferencePolicy`, with one method the update calls per micro-batch; the
loss (``rl/loss.py``) only sees the tensor it returns. :class:`FrozenReference` is the initial
policy as a frozen copy, loaded again from ``model.path`` (a resumed run gets the same reference),
replicated or FSDP2-sharded like the policy, optionally kept in host memory between steps.

A variant is one small subclass: the forward (``forward_logprobs`` at the sampling temperature,
no grad) is the base class's, a variant names the module and the context it runs in. Under LoRA
the reference is :class:`AdaptersOffReference`: the policy itself with its adapters off (the frozen
base is the initial policy; no second copy). :func:`make_reference` picks by ``model.lora``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import torch

from swerl.trainer.step.batch import MicroBatch
from swerl.trainer.config import ModelConfig
from swerl.trainer.distributed import DistInfo
from swerl.trainer.policy.model import load_causal_lm
from swerl.trainer.step.lm_head import configured_chunk_tokens
from swerl.trainer.step.packing import PackMode
from swerl.trainer.step.update import forward_logprobs

log = logging.getLogger(__name__)


class ReferencePolicy:
    """The distribution the KL term pulls the policy towards: ``module`` run in
    :meth:`forward_context` at the sampling temperature.

    Args:
        module: a causal LM placed on the trainer's device (replicated or FSDP2-sharded).
        temperature: the sampling temperature (logits are divided by it, as for pi and pi_old).
        compute_dtype: autocast dtype of a replicated module (None = fp32; FSDP casts itself).
        lm_head_chunk_tokens: positions per chunk of its LM head, as the update's (None = auto).
        pack_rows: layout of its forwards' rows, as the update's (``UpdateSettings.pack_rows``).
    """

    def __init__(self, module: torch.nn.Module, temperature: float, compute_dtype: torch.dtype | None = None, *,
                 lm_head_chunk_tokens: int | None = None, pack_rows: PackMode = "off") -> None:
        self.module = module
        self.temperature = temperature
        self.compute_dtype = compute_dtype
        self.lm_head_chunk_tokens = lm_head_chunk_tokens
        self.pack_rows = pack_rows

    @torch.no_grad()
    def logprobs(self, mb: MicroBatch) -> torch.Tensor:
        """log pi_ref of every next token of ``mb`` at the sampling temperature, without grad.

        Args: mb: a collated micro-batch on the trainer's device.
        Returns: (n, L-1) float32, on the grid of ``mb`` (``MicroBatch.response_values`` cuts it).
        """
        with self.forward_context():
            lp, _ = forward_logprobs(self.module, mb, self.temperature, compute_dtype=self.compute_dtype,
                                     lm_head_chunk_tokens=self.lm_head_chunk_tokens, pack_rows=self.pack_rows)
        return lp

    def forward_context(self) -> contextlib.AbstractContextManager:
        """Context of each reference forward (a LoRA policy: its adapters off)."""
        return contextlib.nullcontext()

    def resident(self) -> contextlib.AbstractContextManager:
        """Context for one step's reference forwards (e.g. bring offloaded weights to the device)."""
        return contextlib.nullcontext()


class AdaptersOffReference(ReferencePolicy):
    """A LoRA policy's frozen base as the reference: ``module`` is the policy (a peft model), run
    with its adapters off (``swerl.trainer.policy.lora.adapters_off``); it holds no weights of its own."""

    def forward_context(self) -> contextlib.AbstractContextManager:
        from swerl.trainer.policy.lora import adapters_off

        return adapters_off(self.module)


def make_reference(cfg: ModelConfig, policy: torch.nn.Module, path: Path, dist_info: DistInfo, temperature: float,
                   compute_dtype: torch.dtype | None, pack_rows: PackMode = "off") -> ReferencePolicy:
    """The KL term's reference for ``cfg``: the LoRA policy with its adapters off
    (:class:`AdaptersOffReference`), else a frozen copy loaded from ``path`` (:func:`load_reference`);
    ``pack_rows``: the update's row layout (the reference is the policy's architecture)."""
    if cfg.lora is not None:
        log.info("reference policy: the LoRA policy with its adapters off (no second copy)")
        return AdaptersOffReference(policy, temperature, compute_dtype, pack_rows=pack_rows,
                                    lm_head_chunk_tokens=configured_chunk_tokens(cfg.lm_head_chunk_tokens))
    return load_reference(cfg, path, dist_info, temperature, compute_dtype, pack_rows)


class FrozenReference(ReferencePolicy):
    """A frozen copy of the initial policy (its parameters never require grad).

    Args:
        module, temperature, compute_dtype: as :class:`ReferencePolicy`; ``module`` is its own copy.
        offload_to: a replicated module lives on this device between steps (``cpu``) and moves to
            ``device`` for a step's forwards; None = stays where it is (FSDP offloads itself).
        device: the trainer's device.
    """

    def __init__(self, module: torch.nn.Module, temperature: float, compute_dtype: torch.dtype | None = None,
                 offload_to: torch.device | None = None, device: torch.device | None = None, *,
                 lm_head_chunk_tokens: int | None = None, pack_rows: PackMode = "off") -> None:
        super().__init__(module.eval().requires_grad_(False), temperature, compute_dtype,
                         lm_head_chunk_tokens=lm_head_chunk_tokens, pack_rows=pack_rows)
        self.offload_to = offload_to
        self.device = device

    @contextlib.contextmanager
    def resident(self) -> Iterator[None]:
        if self.offload_to is None:
            yield
            return
        self.module.to(self.device)
        try:
            yield
        finally:
            self.module.to(self.offload_to)


def load_reference(cfg: ModelConfig, path: Path, dist_info: DistInfo, temperature: float,
                   compute_dtype: torch.dtype | None, pack_rows: PackMode = "off") -> FrozenReference:
    """Load the initial policy from ``path`` again as a frozen reference, placed like the policy.

    The same load path as the policy (``model.load_causal_lm``: rank 0 reads, the other ranks
    build on ``meta`` and receive a broadcast), without gradient checkpointing (no backward).
    FSDP2: sharded over the same mesh with the same mixed precision; ``cfg.reference_cpu_offload``
    keeps its shards in host memory (``CPUOffloadPolicy``). Replicated: on the device, or with
    offload in host memory between steps. Torch's RNG state is left as it was (the reference must
    not shift the seeds of a run that has none).

    Args: cfg: the policy's ModelConfig; path: the resolved HF folder of ``model.path``;
        temperature / compute_dtype / pack_rows: as the update's forwards.
    Returns: a FrozenReference.
    """
    offload, chunk = cfg.reference_cpu_offload, configured_chunk_tokens(cfg.lm_head_chunk_tokens)
    placed = cfg.model_copy(update={"gradient_checkpointing": False, "cpu_offload": offload, "lora": None})
    with torch.random.fork_rng(devices=[dist_info.device] if dist_info.device.type == "cuda" else []):
        module = load_causal_lm(path, placed, dist_info)
    if cfg.fsdp:
        placement = "FSDP-sharded" + (", offloaded to host memory" if offload else "")
        reference = FrozenReference(module, temperature, None, device=dist_info.device, lm_head_chunk_tokens=chunk,
                                    pack_rows=pack_rows)
    else:
        module.to("cpu" if offload else dist_info.device)
        placement = "in host memory between steps" if offload else f"on {dist_info.device}"
        reference = FrozenReference(module, temperature, compute_dtype, offload_to=torch.device("cpu") if offload else None,
                                    device=dist_info.device, lm_head_chunk_tokens=chunk,
                                    pack_rows=pack_rows)
    log.info("reference policy %s: frozen copy of the initial policy, %s", path, placement)
    return reference
