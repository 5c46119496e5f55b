"""One call for the trainer: per-token policy loss + rollout correction + step-level reduction
(+ KL to the reference, entropy) for one micro-batch, and the config-driven advantage dispatch.

Stage: ``rl/``; called by ``trainer/`` once per micro-batch. Pure: tensors and a config in,
a scalar loss and additive metrics out; no distributed calls (the trainer all-reduces the
denominators and cancels the framework's gradient averaging, see ``reductions.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from swerl.rl import advantages as adv_fns
from swerl.rl import policy_loss as pl
from swerl.rl.config import AlgorithmConfig, RolloutCorrectionConfig
from swerl.rl.kl import KL_ESTIMATORS, kl_k3
from swerl.rl.reductions import StepDenominators, masked_token_sum, reduce_microbatch
from swerl.rl.rollout_correction import CORRECTIONS

__all__ = ["ADVANTAGE_ESTIMATORS", "POLICY_LOSSES", "TOKEN_MEAN_METRICS", "compute_advantages",
           "compute_policy_loss", "kl_share", "reported_metric_keys"]


class Registered(NamedTuple):
    """A registry entry: a pure function and the ``AlgorithmConfig`` fields it takes after its tensors."""

    fn: Callable[..., Any]
    params: tuple[str, ...]

    def args(self, config: AlgorithmConfig) -> tuple[Any, ...]:
        """The values of ``params`` in ``config``, in order."""
        return tuple(getattr(config, name) for name in self.params)


ADVANTAGE_ESTIMATORS: dict[str, Registered] = {
    "rloo": Registered(adv_fns.rloo, ()),
    "rloo_n": Registered(adv_fns.rloo_n, ("min_group_size", "filter_zero_variance_groups")),
    "grpo": Registered(adv_fns.grpo, ("grpo_std_eps",)),
}
"""``algorithm.advantage_estimator`` -> fn(rewards (N,), group_ids (N,), exclude (N,) | None, *params)."""

POLICY_LOSSES: dict[str, Registered] = {
    "regular": Registered(pl.regular, ("eps_clip_low", "eps_clip_high")),
    "dual_clip": Registered(pl.dual_clip, ("eps_clip_low", "eps_clip_high", "clip_ratio_c")),
}
"""``algorithm.policy_loss`` -> fn(logprobs (B, T), old_logprobs (B, T), advantages (B,), *params)."""


def compute_advantages(
    config: AlgorithmConfig, rewards: Tensor, group_ids: Tensor, exclude: Tensor | None
) -> tuple[Tensor, dict[str, float]]:
    """Per-trajectory advantages with the configured estimator (docs/algorithms.md, Advantages).

    Args:
        config: validated AlgorithmConfig.
        rewards: (N,) float, finite. group_ids: (N,) int64 (see ``advantages.group_index``).
        exclude: (N,) bool ``exclude_from_baseline`` or None.
    Returns: (N,) float32 advantages and the ``advantage/*`` metrics.
    Raises: advantages.NonFiniteRewardError naming the trajectory with a NaN/inf reward.
    """
    estimator = ADVANTAGE_ESTIMATORS[config.advantage_estimator]
    return estimator.fn(rewards, group_ids, exclude, *estimator.args(config))


TOKEN_MEAN_METRICS = ("tis/imp_ratio_mean", "tis/ratio_mean", "tis/imp_ratio_capped_fraction",
                      "tis/masked_fraction", "tis/masked_neg_adv_fraction", "tis/log_ratio_abs_mean",
                      "policy/kl_ref_mean")
"""Metrics that ``compute_policy_loss`` divides by the step's N_tok: token means once summed."""

KL_REDUCTION = {"seq_mean_token_sum_norm_global": "seq_mean_token_sum_norm"}
"""The KL term's reduction where it differs from ``loss_reduction``: the global mode counts the rows
whose advantage is non-zero, and the KL term carries signal on every row."""


def compute_policy_loss(
    config: AlgorithmConfig, *, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, loss_mask: Tensor,
    denominators: StepDenominators, rollout_logprobs: Tensor | None = None,
    has_rollout_logprobs: Tensor | None = None, ref_logprobs: Tensor | None = None, entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The micro-batch's contribution to the step loss, ready for ``backward``.

    loss = reduce(w * l_policy) + kl_loss_coef * reduce_kl(kl) - entropy_coef * token_mean(H):
    l_policy is ``regular``/``dual_clip``, w the rollout correction's weight (1 without one),
    ``reduce`` the configured reduction with the step's denominators, ``reduce_kl`` the same but
    counting every nonempty row in the global mode (``KL_REDUCTION``), kl the ``kl_estimator``.
    Summed over the step's micro-batches and ranks it is the step objective; before ``backward``
    multiply by ``reductions.dp_loss_scale(world_size)`` when DDP/FSDP averages gradients.

    Args:
        config: validated AlgorithmConfig.
        logprobs: (B, T) float, log pi of the sampled tokens at the sampling temperature (with grad).
        old_logprobs: (B, T) float, log pi_old (weights that produced the batch), constant.
        advantages: (B,) float32 per trajectory (or (B, T)).
        loss_mask: (B, T) bool, True on model-generated tokens.
        denominators: StepDenominators summed over all micro-batches of the step and all-reduced
            (SUM) over ranks, from ``reductions.denominator_parts(loss_mask, advantages)``.
        rollout_logprobs: (B, T) float, sampler log mu, or None (every row gets w = 1, counted).
        has_rollout_logprobs: (B,) bool, or None = "all rows have them" when mu is given.
        ref_logprobs: (B, T) float log pi_ref of the reference policy at the sampling temperature;
            required when ``use_kl_loss``.
        entropy: (B, T) float per-token entropy (``policy_loss.entropy_from_logits``, with grad);
            required when ``entropy_coef > 0``, logged when given.
    Returns: (loss, metrics). loss: scalar float32 tensor. metrics: python floats, each
        ADDITIVE: sum them over micro-batches and all-reduce-SUM over ranks to get the step
        value (``reported_metric_keys`` lists them; ``TOKEN_MEAN_METRICS`` are token means over
        the step's N_tok); ``loss/kl_share`` is derived from the sums by :func:`kl_share`.
    Raises: ValueError if a required input is missing or shapes disagree.
    """
    _check_shapes(logprobs, old_logprobs, loss_mask)
    mask = loss_mask.bool()
    n_tok = max(denominators.num_tokens, 1.0)
    # Off-mask positions (padding, prompt, observations) may hold -inf/NaN log-probs: replace them
    # before any arithmetic so that neither the value nor the gradient (0 * nan) can pick them up.
    logprobs, old_logprobs, rollout_logprobs, ref_logprobs, entropy = (
        None if t is None else torch.where(mask, t, 0.0)
        for t in (logprobs, old_logprobs, rollout_logprobs, ref_logprobs, entropy))
    policy_loss = POLICY_LOSSES[config.policy_loss]
    out = policy_loss.fn(logprobs, old_logprobs, advantages, *policy_loss.args(config))
    per_token = out.per_token_loss
    metrics: dict[str, float] = {"policy/clip_fraction": float((out.is_clipped & mask).sum()) / n_tok}
    correction = config.correction
    if correction is not None:
        weights, correction_metrics = _correct(correction, old_logprobs, rollout_logprobs, has_rollout_logprobs,
                                               mask, advantages, n_tok)
        per_token = per_token * weights
        metrics.update(correction_metrics)
    policy = reduce_microbatch(per_token, mask, denominators, config.loss_reduction, config.max_seq_len)
    metrics["loss/policy"] = float(policy.detach())
    loss = policy
    if config.use_kl_loss:
        loss = loss + _kl_term(config, logprobs, ref_logprobs, per_token, mask, denominators, n_tok, metrics)
    loss = _add_entropy(loss, config, entropy, mask, n_tok, metrics)
    metrics["loss/total"] = float(loss.detach())
    return loss, metrics


def reported_metric_keys(config: AlgorithmConfig) -> set[str]:
    """The metric keys ``compute_policy_loss`` reports under ``config`` (every micro-batch, every rank)."""
    keys = {"loss/policy", "loss/total", "policy/clip_fraction"}
    correction = config.correction
    if correction is not None:
        keys |= {"tis/imp_ratio_mean", "tis/ratio_mean", "tis/log_ratio_abs_mean", "tis/rows_without_logprobs"}
        keys |= ({"tis/imp_ratio_capped_fraction"} if correction.mode == "truncate"
                 else {"tis/masked_fraction", "tis/masked_neg_adv_fraction"})
    if config.use_kl_loss:
        keys |= {"loss/kl", "policy/kl_ref_mean", "loss/policy_abs"}
    if config.entropy_coef > 0:
        keys.add("policy/entropy")
    return keys


def kl_share(summed: dict[str, float], kl_loss_coef: float) -> float:
    """The KL term's share of the loss magnitude, from the step's summed metrics.

    Formula: |beta * loss/kl| / (|beta * loss/kl| + loss/policy_abs), loss/policy_abs being the
    reduced |w * l_policy|: in [0, 1]; 0 when both are 0. It compares the scales the two terms
    reach in the objective (a seqnorm reduction divides the policy term by L_max, the KL term
    likewise), not their gradients.

    Args: summed: metrics summed over the step's micro-batches and ranks, holding ``loss/kl``
        and ``loss/policy_abs``; kl_loss_coef: beta.
    Returns: python float in [0, 1].
    """
    term = abs(kl_loss_coef * summed["loss/kl"])
    total = term + summed["loss/policy_abs"]
    return term / total if total > 0 else 0.0


def _check_shapes(logprobs: Tensor, old_logprobs: Tensor, loss_mask: Tensor) -> None:
    if logprobs.shape != old_logprobs.shape or logprobs.shape != loss_mask.shape:
        raise ValueError(
            f"shapes: logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)}, "
            f"loss_mask {tuple(loss_mask.shape)} must all be (B, T)"
        )


def _correct(
    correction: RolloutCorrectionConfig, old_logprobs: Tensor, rollout_logprobs: Tensor | None,
    has_rollout_logprobs: Tensor | None, mask: Tensor, advantages: Tensor, n_tok: float,
) -> tuple[Tensor, dict[str, float]]:
    """The correction's weights (B, T) for the per-token loss and its additive ``tis/*`` metrics."""
    batch = old_logprobs.shape[0]
    if rollout_logprobs is None:
        rollout_logprobs = torch.zeros_like(old_logprobs)
        has_rollout_logprobs = torch.zeros(batch, dtype=torch.bool, device=old_logprobs.device)
    elif has_rollout_logprobs is None:
        has_rollout_logprobs = torch.ones(batch, dtype=torch.bool, device=old_logprobs.device)
    fn = CORRECTIONS[(correction.level, correction.mode)]
    out = fn(old_logprobs, rollout_logprobs, has_rollout_logprobs, mask, correction.high, correction.lower_bound)
    metrics = {
        "tis/imp_ratio_mean": float(masked_token_sum(out.weights, mask)) / n_tok,
        "tis/ratio_mean": float(masked_token_sum(torch.exp(out.log_ratio), mask)) / n_tok,
        "tis/log_ratio_abs_mean": float(masked_token_sum(out.log_ratio.abs(), mask)) / n_tok,
        "tis/rows_without_logprobs": float((~has_rollout_logprobs.bool()).sum()),
    }
    if correction.mode == "truncate":
        metrics["tis/imp_ratio_capped_fraction"] = float((out.is_capped & mask).sum()) / n_tok
    else:
        adv = advantages.float().unsqueeze(-1) if advantages.dim() == 1 else advantages.float()
        metrics["tis/masked_fraction"] = float((out.is_masked & mask).sum()) / n_tok
        metrics["tis/masked_neg_adv_fraction"] = float((out.is_masked & mask & (adv < 0)).sum()) / n_tok
    return out.weights, metrics


def _kl_term(
    config: AlgorithmConfig, logprobs: Tensor, ref_logprobs: Tensor | None, policy_per_token: Tensor, mask: Tensor,
    denominators: StepDenominators, n_tok: float, metrics: dict[str, float],
) -> Tensor:
    """``kl_loss_coef * reduce_kl(kl_estimator(log pi, log pi_ref))``; adds to ``metrics``
    ``loss/kl`` (the reduced estimate), ``policy/kl_ref_mean`` (the token mean of k3 whatever the
    estimator, so arms compare on one scale) and ``loss/policy_abs`` (the reduced |w * l_policy|,
    for :func:`kl_share`)."""
    if ref_logprobs is None:
        raise ValueError("use_kl_loss is true but no ref_logprobs were given")
    per_token = KL_ESTIMATORS[config.kl_estimator](logprobs, ref_logprobs)
    reduction = KL_REDUCTION.get(config.loss_reduction, config.loss_reduction)
    kl = reduce_microbatch(per_token, mask, denominators, reduction, config.max_seq_len)
    with torch.no_grad():
        metrics["loss/kl"] = float(kl)
        metrics["policy/kl_ref_mean"] = float(masked_token_sum(kl_k3(logprobs, ref_logprobs), mask)) / n_tok
        metrics["loss/policy_abs"] = float(reduce_microbatch(policy_per_token.abs(), mask, denominators,
                                                             config.loss_reduction, config.max_seq_len))
    return config.kl_loss_coef * kl


def _add_entropy(
    loss: Tensor, config: AlgorithmConfig, entropy: Tensor | None, mask: Tensor, n_tok: float,
    metrics: dict[str, float],
) -> Tensor:
    """``loss - entropy_coef * token_mean(H)`` when the bonus is on; adds ``policy/entropy`` to
    ``metrics`` whenever an entropy is given."""
    if config.entropy_coef > 0 and entropy is None:
        raise ValueError(f"entropy_coef={config.entropy_coef} > 0 but no per-token entropy was given")
    if entropy is not None:
        ent = masked_token_sum(entropy, mask) / n_tok
        metrics["policy/entropy"] = float(ent.detach())
        if config.entropy_coef > 0:
            loss = loss - config.entropy_coef * ent
    return loss
