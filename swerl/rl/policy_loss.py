"""Per-token policy losses (PPO clip, dual clip) and the optional entropy term (KL: ``kl.py``).

Stage: ``rl/``. Every function maps (B, T) tensors to (B, T) float32 per-token values; the
loss mask and the reduction are applied later (``reductions.py``). See docs/algorithms.md, Policy loss.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = [
    "LOG_RATIO_CLAMP",
    "PolicyLossOutput",
    "log_ratio",
    "clipped_surrogate",
    "regular",
    "dual_clip",
    "entropy_from_logits",
    "masked_fraction",
]

LOG_RATIO_CLAMP = 20.0
"""Log-ratios are clamped to [-20, 20] before ``exp`` (exp(20) ~ 4.9e8: finite in fp32)."""


class PolicyLossOutput(NamedTuple):
    """Per-token policy loss and where the clipped branch won.

    Attributes:
        per_token_loss: (B, T) float32, NOT masked (padding positions hold finite garbage).
        is_clipped: (B, T) bool, True where a clipped branch (PPO clip or the dual-clip bound)
            gave the loss; ``policy/clip_fraction`` is its masked mean.
    """

    per_token_loss: Tensor
    is_clipped: Tensor


def log_ratio(logprobs: Tensor, old_logprobs: Tensor) -> Tensor:
    """delta = clamp(log pi - log pi_old, -20, 20) in float32.

    Args: logprobs, old_logprobs: (B, T) float (any float dtype; computed in fp32).
    Returns: (B, T) float32; differentiable w.r.t. ``logprobs`` (zero gradient where clamped).
    """
    return (logprobs.float() - old_logprobs.float()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def _broadcast_advantages(advantages: Tensor, like: Tensor) -> Tensor:
    """(B,) per-trajectory or (B, T) per-token advantages -> (B, T) float32."""
    adv = advantages.float()
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    return adv.expand_as(like)


def clipped_surrogate(ratio: Tensor, advantages: Tensor, eps_clip_low: float, eps_clip_high: float) -> PolicyLossOutput:
    """PPO's clipped surrogate for any ratio: -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) per token.

    Args: ratio: (B, T) float32 (token ratios, or GSPO's sequence ratio on every column);
        advantages: (B,) float32. Returns: PolicyLossOutput, ``is_clipped`` where the clipped branch won.
    Source: Schulman et al. 2017, eq. 7.
    """
    adv = _broadcast_advantages(advantages, ratio)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - eps_clip_low, 1.0 + eps_clip_high) * adv
    return PolicyLossOutput(-torch.minimum(unclipped, clipped), clipped < unclipped)


def regular(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    eps_clip_low: float,
    eps_clip_high: float,
) -> PolicyLossOutput:
    """PPO clipped surrogate with asymmetric clip range.

    Formula: r = exp(clamp(log pi - log pi_old, -20, 20));
             l = -min(r*A, clip(r, 1 - eps_low, 1 + eps_high)*A)  (= max(-r*A, -clip(r)*A)).
    With r == 1 (one optimizer step per batch) l = -A and dl/dlog pi = -A (REINFORCE).
    A token counts as clipped when the clipped term is strictly smaller than r*A.

    Args:
        logprobs: (B, T) float, current policy log pi of the sampled tokens (requires grad).
        old_logprobs: (B, T) float, log pi_old (constant).
        advantages: (B,) or (B, T) float.
        eps_clip_low, eps_clip_high: clip range [1 - eps_low, 1 + eps_high] (seed: 0.2, 0.05).
    Returns: PolicyLossOutput with (B, T) float32 loss and bool clip mask.
    Source: Schulman et al. 2017, "Proximal Policy Optimization Algorithms", eq. 7;
        asymmetric range ("clip-higher"): Yu et al. 2025, DAPO.
    """
    return clipped_surrogate(torch.exp(log_ratio(logprobs, old_logprobs)), advantages, eps_clip_low, eps_clip_high)


def dual_clip(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    eps_clip_low: float,
    eps_clip_high: float,
    clip_ratio_c: float,
) -> PolicyLossOutput:
    """Dual-clip PPO: ``regular`` plus an upper bound on the loss of negative-advantage tokens.

    Formula: l = regular(...); for A < 0: l = min(l, -c*A), c = ``clip_ratio_c`` > 1 (seed 3.0).
    This bounds the push-down of a token whose ratio grew far above 1 (r > c).

    Args: as ``regular``, plus clip_ratio_c: float > 1.
    Returns: PolicyLossOutput; ``is_clipped`` also marks tokens where the -c*A bound won.
    Source: Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL" (dual clip),
        as in verl ``compute_policy_loss`` (clip_ratio_c).
    """
    base = regular(logprobs, old_logprobs, advantages, eps_clip_low, eps_clip_high)
    adv = _broadcast_advantages(advantages, base.per_token_loss)
    bound = -clip_ratio_c * adv
    dual_wins = (adv < 0) & (bound < base.per_token_loss)
    loss = torch.where(dual_wins, bound, base.per_token_loss)
    return PolicyLossOutput(loss, base.is_clipped | dual_wins)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the categorical distribution per position.

    Formula: H = logsumexp(z) - sum softmax(z) * z, in float32.
    Args: logits: (B, T, V) float, already divided by the sampling temperature.
    Returns: (B, T) float32 >= 0, unmasked (differentiable).
    """
    z = logits.float()
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)


def masked_fraction(flags: Tensor, loss_mask: Tensor) -> float:
    """Fraction of trainable tokens where ``flags`` holds (0.0 for an empty mask).

    Args: flags (B, T) bool; loss_mask (B, T) bool or 0/1.
    Returns: python float in [0, 1] (e.g. the local ``policy/clip_fraction``).
    """
    mask = loss_mask.bool()
    return float((flags & mask).sum()) / max(int(mask.sum()), 1)
