"""Per-token estimators of KL(pi || pi_ref) from the sampled tokens (Schulman's k1, k2, k3).

Stage: ``rl/``. Each maps (B, T) log-probs of the current policy (with grad) and of the frozen
reference to a (B, T) float32 estimate, unmasked; ``loss.py`` masks and reduces it like the policy
loss. With d = log pi_ref - log pi of a token sampled from pi:

| estimator | value | E_pi[value] | E_pi[gradient as a loss term] |
|---|---|---|---|
| ``k1`` | -d | KL(pi || ref) | 0 (it only tracks the KL) |
| ``k2`` | d^2 / 2 | ~KL(pi || ref) (biased, >= 0) | grad KL(pi || ref) |
| ``k3`` | exp(d) - d - 1 | KL(pi || ref) (unbiased, >= 0) | grad KL(ref || pi) |

What peers call ``low_var_kl``: verl's ``low_var_kl`` (also ``k3``) and SkyRL's ``k3`` are k3 with d
clamped to [-20, 20] and the value clamped to [-10, 10] (a token past 10 gets no gradient);
open-instruct's ``kl_estimator=2`` is k3 written ``expm1(-x) + x`` with x = -d clamped to [-40, 40];
prime-rl has no reference-KL estimator choice (its ``ref_kl`` loss uses d as a detached per-token
reward for distillation). swerl's k3 clamps d to [-20, 20] (exp(20) is finite in fp32) and not the
value; k1 and k2 are polynomials and need no clamp (a clamp would zero their gradient).
"""

from __future__ import annotations

import torch
from torch import Tensor

from swerl.rl.policy_loss import LOG_RATIO_CLAMP

__all__ = ["KL_ESTIMATORS", "kl_k1", "kl_k2", "kl_k3"]


def _ref_log_ratio(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """d = log pi_ref - log pi in float32 (differentiable w.r.t. ``logprobs``)."""
    return ref_logprobs.float() - logprobs.float()


def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k1 = log pi - log pi_ref per token: unbiased, can be negative; as a loss its expected
    gradient is 0, so it only makes sense as a tracked value or a reward penalty.

    Args: logprobs (B, T) float (requires grad), ref_logprobs (B, T) float (constant).
    Returns: (B, T) float32, unmasked.
    Source: Schulman 2020, "Approximating KL Divergence" (k1); verl/SkyRL ``kl``/``k1``.
    """
    return -_ref_log_ratio(logprobs, ref_logprobs)


def kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k2 = (log pi - log pi_ref)^2 / 2 per token: non-negative, biased; its gradient is the
    gradient of KL(pi || pi_ref) for on-policy samples.

    Args: logprobs (B, T) float (requires grad), ref_logprobs (B, T) float (constant).
    Returns: (B, T) float32 >= 0, unmasked.
    Source: Schulman 2020 (k2); verl/SkyRL ``mse``/``k2``; open-instruct ``kl_estimator=1``.
    """
    return 0.5 * _ref_log_ratio(logprobs, ref_logprobs).square()


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 estimator of KL(pi || pi_ref) per token, non-negative and unbiased.

    Formula: d = clamp(log pi_ref - log pi, -20, 20); k3 = exp(d) - d - 1.
    Args: logprobs (B, T) float (requires grad), ref_logprobs (B, T) float (constant).
    Returns: (B, T) float32 >= 0, unmasked; finite for any finite inputs (d = 89 gives
        exp(20) - 21, zero gradient past the clamp).
    Source: Schulman 2020, "Approximating KL Divergence" (k3); verl ``low_var_kl`` (which also
        clamps the value to [-10, 10]).
    """
    d = _ref_log_ratio(logprobs, ref_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.exp(d) - d - 1.0


KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
"""``algorithm.kl_estimator`` -> fn(logprobs (B, T), ref_logprobs (B, T)) -> (B, T) float32."""
