"""Policy losses beside PPO clip: GSPO (sequence-level ratio and clipping) and CISPO (clipped,
detached IS weight times the log-prob).

Stage: ``rl/``. Like ``policy_loss.py`` every function maps (B, T) tensors to a (B, T) float32
per-token loss, NOT masked and not reduced: the loss mask, the rollout correction's weight and the
step-level reduction (``reductions.py``) apply afterwards exactly as for ``regular``. GSPO's loss
is a row's loss placed on each of its trainable tokens (the "GSPO-token" form), so that
``sequence_mean`` gives the paper's objective and the other reductions weigh rows as they weigh
tokens. See docs/algorithms.md, Policy loss.
"""

from __future__ import annotations

import torch
from torch import Tensor

from swerl.rl.policy_loss import PolicyLossOutput, _broadcast_advantages, clipped_surrogate, log_ratio

__all__ = ["gspo", "gspo_log_sequence_ratio", "cispo"]


def gspo_log_sequence_ratio(logprobs: Tensor, old_logprobs: Tensor, loss_mask: Tensor) -> Tensor:
    """log s_i = (1/n_i) sum_t clamp(log pi - log pi_old, -20, 20) over the row's trainable tokens.

    Args: logprobs, old_logprobs: (B, T) float; loss_mask: (B, T) bool (n_i = its row sums, max 1).
    Returns: (B, 1) float32, differentiable w.r.t. ``logprobs``; 0 for a row without trainable token.
    """
    mask = loss_mask.bool()
    delta = torch.where(mask, log_ratio(logprobs, old_logprobs), 0.0)
    return delta.sum(dim=-1, keepdim=True) / mask.sum(dim=-1, keepdim=True).clamp(min=1)


def gspo(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    eps_clip_low: float,
    eps_clip_high: float,
) -> PolicyLossOutput:
    """Group Sequence Policy Optimization, token form.

    Formula: s_i = exp(log s_i) (:func:`gspo_log_sequence_ratio`, a geometric mean: length-independent);
             s_it = sg(s_i) * exp(log pi_t - sg(log pi_t))   (value s_i, d s_it / d log pi_t = s_i);
             l_it = -min(s_it * A_i, clip(s_it, 1 - eps_low, 1 + eps_high) * A_i).
    Every trainable token of row i carries the row's loss value, so ``sequence_mean`` (sum_t l_it / n_i
    averaged over rows) is the paper's objective -min(s_i A_i, clip(s_i) A_i) with the paper's gradient
    (s_i / n_i) sum_t grad log pi_t; a row whose s_i left the clip range on the winning side is clipped whole.

    Args:
        logprobs: (B, T) float log pi (requires grad); old_logprobs: (B, T) float log pi_old, constant.
        advantages: (B,) or (B, T) float (a row's advantage is constant along it in swerl).
        loss_mask: (B, T) bool, the row's trainable tokens (they define n_i and the geometric mean).
        eps_clip_low, eps_clip_high: clip range of s_i (the paper: 3e-4 / 4e-4).
    Returns: PolicyLossOutput; ``is_clipped`` holds on every token of a clipped row.
    Source: Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071, eqs. 5-7 and
        GSPO-token (eq. 13); verl ``compute_policy_loss_gspo``.
    """
    log_s = gspo_log_sequence_ratio(logprobs, old_logprobs, loss_mask).detach()
    current = logprobs.float()
    ratio = torch.exp(current - current.detach() + log_s)  # (B, T), value s_i on every column
    return clipped_surrogate(ratio, advantages, eps_clip_low, eps_clip_high)


def cispo(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    eps_clip_low: float,
    eps_clip_high: float,
) -> PolicyLossOutput:
    """Clipped IS-weight policy optimization.

    Formula: r_t = exp(clamp(log pi - log pi_old, -20, 20));
             l_t = -sg(clip(r_t, 1 - eps_low, 1 + eps_high)) * A * log pi_t.
    The weight is clipped and detached; the gradient -w_t A grad log pi_t flows on EVERY token (no
    token is dropped by clipping, unlike PPO). Its value is -w A log pi, not -r A: ``loss/policy``
    is not comparable to PPO's. MiniMax set no effective lower bound (eps_clip_low near 1).

    Args: as :func:`swerl.rl.policy_loss.regular`.
    Returns: PolicyLossOutput; ``is_clipped`` where r_t left [1 - eps_low, 1 + eps_high] (the weight
        was clipped: the token still trains).
    Source: MiniMax 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning
        Attention", arXiv 2506.13585, eq. 4.
    """
    current = logprobs.float()
    ratio = torch.exp(log_ratio(logprobs, old_logprobs)).detach()
    weight = ratio.clamp(1.0 - eps_clip_low, 1.0 + eps_clip_high)
    adv = _broadcast_advantages(advantages, current)
    is_clipped = (ratio < 1.0 - eps_clip_low) | (ratio > 1.0 + eps_clip_high)
    return PolicyLossOutput(-weight * adv * current, is_clipped)
