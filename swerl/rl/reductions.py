"""Loss reductions with optimizer-step-level denominators (docs/algorithms.md, Loss reductions).

Stage: ``rl/``. The four reductions turn masked per-token losses l_it into one objective per
optimizer step. Their denominators are counted over the WHOLE step (every micro-batch of the
accumulation window, every data-parallel rank), so micro-batching, gradient accumulation and
data parallelism never change the result:

| mode                             | step objective                                       |
|----------------------------------|------------------------------------------------------|
| ``token_mean``                   | sum m*l / max(N_tok, 1)                              |
| ``sequence_mean``                | sum_i (sum_t m*l / n_i) / max(B, 1)                  |
| ``seq_mean_token_sum_norm``      | sum m*l / (max(B, 1) * L_max)                        |
| ``seq_mean_token_sum_norm_global`` | sum m*l / (max(B_{A!=0}, 1) * L_max)               |

with n_i = sum_t m_it, N_tok = sum_i n_i, B = #{i : n_i > 0}, B_{A!=0} = #{i : n_i > 0 and
A_i != 0}. How the trainer uses this module for one optimizer step::

    parts = sum((denominator_parts(mb.loss_mask, mb.advantages) for mb in micro_batches),
                StepDenominators.zero())                          # all micro-batches of the step
    t = parts.as_tensor(); dist.all_reduce(t)                     # SUM over ranks (one call)
    denominators = StepDenominators.from_tensor(t)
    for mb in micro_batches:                                      # no 1/num_micro_batches anywhere
        loss = reduce_microbatch(per_token_loss(mb), mb.loss_mask, denominators, mode, max_seq_len)
        (loss * dp_loss_scale(world_size)).backward()             # cancel DDP/FSDP averaging

Sources: token_mean: DAPO (Yu et al. 2025) token-level loss; sequence_mean: GRPO (Shao et al.
2024); seq_mean_token_sum_norm: Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like
Training"); the global variant: MarinSkyRL ``loss_reduction.py`` (denominator over rows with
non-zero advantage), here counted per step instead of per batch shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "LossReduction",
    "StepDenominators",
    "denominator_parts",
    "REDUCTIONS",
    "reduce_microbatch",
    "masked_token_sum",
    "dp_loss_scale",
]

LossReduction = Literal["token_mean", "sequence_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum_norm_global"]


@dataclass(frozen=True)
class StepDenominators:
    """Counts over one optimizer step; additive over micro-batches and ranks.

    Attributes:
        num_tokens: N_tok, trainable tokens (sum of the loss mask).
        num_nonempty_rows: B, rows with at least one trainable token.
        num_signal_rows: B_{A!=0}, nonempty rows whose advantage is non-zero (for (B, T)
            advantages: non-zero on at least one trainable token).
    """

    num_tokens: float
    num_nonempty_rows: float
    num_signal_rows: float

    @classmethod
    def zero(cls) -> "StepDenominators":
        """The neutral element for summing over micro-batches."""
        return cls(0.0, 0.0, 0.0)

    def __add__(self, other: "StepDenominators") -> "StepDenominators":
        return StepDenominators(
            self.num_tokens + other.num_tokens,
            self.num_nonempty_rows + other.num_nonempty_rows,
            self.num_signal_rows + other.num_signal_rows,
        )

    def as_tensor(self, device: torch.device | str = "cpu") -> Tensor:
        """(3,) float64 [num_tokens, num_nonempty_rows, num_signal_rows], for one all_reduce(SUM)."""
        return torch.tensor([self.num_tokens, self.num_nonempty_rows, self.num_signal_rows], dtype=torch.float64,
                            device=device)

    @classmethod
    def from_tensor(cls, t: Tensor) -> "StepDenominators":
        """Inverse of :meth:`as_tensor` (after the all-reduce)."""
        a, b, c = (float(x) for x in t.detach().cpu().tolist())
        return cls(a, b, c)


def denominator_parts(loss_mask: Tensor, advantages: Tensor) -> StepDenominators:
    """This micro-batch's share of the step denominators (sum them over the step and ranks).

    Args:
        loss_mask: (B, T) bool or 0/1, 1 on model-generated tokens.
        advantages: (B,) per-trajectory or (B, T) per-token float.
    Returns: StepDenominators of exact integer counts (as floats).
    """
    mask = loss_mask.bool()
    nonempty = mask.any(dim=-1)
    if advantages.dim() == 1:
        signal = nonempty & (advantages != 0)
    else:
        signal = ((advantages != 0) & mask).any(dim=-1)
    return StepDenominators(float(mask.sum()), float(nonempty.sum()), float(signal.sum()))


def masked_token_sum(per_token: Tensor, loss_mask: Tensor) -> Tensor:
    """sum_{i,t} m_it * x_it as a float32 scalar, via ``torch.where`` (NaN/inf off-mask is ignored).

    Args: per_token (B, T) float; loss_mask (B, T) bool or 0/1.
    """
    return torch.where(loss_mask.bool(), per_token.float(), 0.0).sum()


def _require_max_seq_len(mode: str, max_seq_len: int | None) -> int:
    if max_seq_len is None or max_seq_len <= 0:
        raise ValueError(f"loss_reduction={mode!r} requires a positive max_seq_len, got {max_seq_len}")
    return max_seq_len


def token_mean(per_token_loss: Tensor, mask: Tensor, d: StepDenominators, max_seq_len: int | None) -> Tensor:
    """sum m*l / max(N_tok, 1) over this micro-batch's tokens (step-level N_tok)."""
    return masked_token_sum(per_token_loss, mask) / max(d.num_tokens, 1.0)


def sequence_mean(per_token_loss: Tensor, mask: Tensor, d: StepDenominators, max_seq_len: int | None) -> Tensor:
    """sum_i (sum_t m*l / n_i) / max(B, 1); the 1/n_i factor is applied per row here."""
    row_sum = torch.where(mask, per_token_loss.float(), 0.0).sum(dim=-1)
    row_len = mask.sum(dim=-1).clamp(min=1).float()
    return (row_sum / row_len).sum() / max(d.num_nonempty_rows, 1.0)


def seq_mean_token_sum_norm(
    per_token_loss: Tensor, mask: Tensor, d: StepDenominators, max_seq_len: int | None
) -> Tensor:
    """sum m*l / (max(B, 1) * L_max) (Dr. GRPO)."""
    l_max = _require_max_seq_len("seq_mean_token_sum_norm", max_seq_len)
    return masked_token_sum(per_token_loss, mask) / (max(d.num_nonempty_rows, 1.0) * l_max)


def seq_mean_token_sum_norm_global(
    per_token_loss: Tensor, mask: Tensor, d: StepDenominators, max_seq_len: int | None
) -> Tensor:
    """sum m*l / (max(B_{A!=0}, 1) * L_max): only rows that carry signal count."""
    l_max = _require_max_seq_len("seq_mean_token_sum_norm_global", max_seq_len)
    return masked_token_sum(per_token_loss, mask) / (max(d.num_signal_rows, 1.0) * l_max)


REDUCTIONS = {
    "token_mean": token_mean,
    "sequence_mean": sequence_mean,
    "seq_mean_token_sum_norm": seq_mean_token_sum_norm,
    "seq_mean_token_sum_norm_global": seq_mean_token_sum_norm_global,
}
"""Reduction name -> function(per_token_loss, bool mask, step denominators, max_seq_len)."""


def reduce_microbatch(
    per_token_loss: Tensor,
    loss_mask: Tensor,
    denominators: StepDenominators,
    mode: LossReduction,
    max_seq_len: int | None = None,
) -> Tensor:
    """This micro-batch's contribution to the step objective: summing the returned scalars
    (and their gradients) over all micro-batches of the step and all ranks gives exactly the
    step objective of ``mode`` (module table). Never divide it by the number of micro-batches.

    For ``sequence_mean`` the per-row factor 1/n_i is applied here (rows are never split
    across micro-batches); for the other modes the contribution is sum m*l / D with the
    step-level D. Empty rows and off-mask positions add nothing (masked with ``where``).

    Args:
        per_token_loss: (B, T) float, e.g. TIS-weighted PPO loss; requires grad.
        loss_mask: (B, T) bool or 0/1.
        denominators: the step's StepDenominators, summed over micro-batches and ranks.
        mode: one of the four reductions (a ``Literal``; validated by ``AlgorithmConfig``).
        max_seq_len: L_max in tokens; required by the two seqnorm modes.
    Returns: scalar float32 tensor.
    Raises: ValueError for a seqnorm mode without a positive max_seq_len.
    """
    return REDUCTIONS[mode](per_token_loss, loss_mask.bool(), denominators, max_seq_len)


def dp_loss_scale(world_size: int, grads_averaged: bool = True) -> float:
    """Factor to multiply each micro-batch loss by before ``backward`` under data parallelism.

    The contributions of ``reduce_microbatch`` are already divided by step-global (all-rank)
    denominators, so the correct gradient is the SUM of the ranks' gradients. DDP and FSDP
    AVERAGE gradients (all_reduce then / world_size), which would apply an extra 1/W; scaling
    the loss by W cancels it. Pass ``grads_averaged=False`` for a SUM all-reduce (factor 1).

    Args: world_size: number of data-parallel ranks W >= 1.
    Returns: W if ``grads_averaged`` else 1.0.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    return float(world_size) if grads_averaged else 1.0
