"""Truncated importance sampling (TIS): per-token weights correcting sampler/trainer mismatch.

Stage: ``rl/``. The weight multiplies the per-token policy loss after clipping and before the
reduction; it never touches a denominator, the KL or the entropy term. See docs/algorithms.md, Truncated importance sampling.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from swerl.rl.policy_loss import LOG_RATIO_CLAMP

__all__ = ["TisOutput", "tis_weights"]


class TisOutput(NamedTuple):
    """TIS weights and their diagnostics.

    Attributes:
        weights: (B, T) float32, detached, in (0, cap]; exactly 1 on rows without rollout
            log-probs.
        log_ratio: (B, T) float32, clamp(log pi_old - log mu, -20, 20); 0 on rows without.
        is_capped: (B, T) bool, exp(log_ratio) > cap (the cap was applied).
        metrics: masked means over the trainable tokens of this micro-batch (rows without
            rollout log-probs enter with w = 1 and |log_ratio| = 0): ``tis/imp_ratio_mean``,
            ``tis/imp_ratio_capped_fraction``, ``tis/log_ratio_abs_mean``; and the row count
            ``tis/rows_without_logprobs``.
    """

    weights: Tensor
    log_ratio: Tensor
    is_capped: Tensor
    metrics: dict[str, float]


def tis_weights(
    old_logprobs: Tensor,
    rollout_logprobs: Tensor,
    has_rollout_logprobs: Tensor,
    loss_mask: Tensor,
    cap: float,
) -> TisOutput:
    """Per-token truncated importance weight w = min(pi_old / mu, C), no lower bound.

    Formula: w_t = min(exp(clamp(log pi_old_t - log mu_t, -20, 20)), C) on rows with rollout
    log-probs, w_t = 1 on rows without (counted; the sampler returned none). Computed under
    ``torch.no_grad`` in float32, masked with ``torch.where`` (never 0 * inf), so a row with
    trainer -2.0 vs rollout -91.0 gives w = C, finite. Values of ``rollout_logprobs`` on rows
    without log-probs are ignored (they may be 0, NaN or garbage).

    Args:
        old_logprobs: (B, T) float, log pi_old of the sampled tokens (trainer recomputed at the
            sampling temperature).
        rollout_logprobs: (B, T) float, log mu of the sampled tokens as returned by the sampler
            (after temperature scaling, aligned by token id).
        has_rollout_logprobs: (B,) bool.
        loss_mask: (B, T) bool or 0/1, trainable (model-generated) tokens; used for metrics only.
        cap: C > 0 (seed run 2.0).
    Returns: TisOutput.
    Raises: ValueError if cap <= 0 or shapes mismatch.
    Source: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL
        Training" (truncated importance sampling, fengyao.notion.site/off-policy-rl).
    """
    if cap <= 0:
        raise ValueError(f"TIS cap must be > 0, got {cap}")
    if old_logprobs.shape != rollout_logprobs.shape or has_rollout_logprobs.shape != old_logprobs.shape[:1]:
        raise ValueError(
            f"shapes: old_logprobs {tuple(old_logprobs.shape)}, rollout_logprobs "
            f"{tuple(rollout_logprobs.shape)}, has_rollout_logprobs {tuple(has_rollout_logprobs.shape)}"
        )
    with torch.no_grad():
        has = has_rollout_logprobs.bool().unsqueeze(-1).expand_as(old_logprobs)
        raw = old_logprobs.detach().float() - rollout_logprobs.detach().float()
        delta = torch.where(has, raw, 0.0).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        ratio = torch.exp(delta)
        is_capped = has & (ratio > cap)
        weights = torch.where(has, ratio.clamp(max=cap), 1.0)
        counted = loss_mask.bool()
        n = max(int(counted.sum()), 1)
        metrics = {
            "tis/imp_ratio_mean": float(torch.where(counted, weights, 0.0).sum()) / n,
            "tis/imp_ratio_capped_fraction": float((is_capped & counted).sum()) / n,
            "tis/log_ratio_abs_mean": float(torch.where(counted, delta.abs(), 0.0).sum()) / n,
            "tis/rows_without_logprobs": float((~has_rollout_logprobs.bool()).sum()),
        }
    return TisOutput(weights, delta, is_capped, metrics)
