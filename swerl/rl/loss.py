"""One call for the trainer: per-token policy loss + TIS + step-level reduction (+ KL, entropy)
for one micro-batch, and the config-driven advantage dispatch.

Stage: ``rl/``; called by ``trainer/`` once per micro-batch. Pure: tensors and a config in,
a scalar loss and additive metrics out; no distributed calls (the trainer all-reduces the
denominators and cancels the framework's gradient averaging, see ``reductions.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from swerl.rl import advantages as adv_fns
from swerl.rl import policy_loss as pl
from swerl.rl.config import AlgorithmConfig
from swerl.rl.reductions import StepDenominators, masked_token_sum, reduce_microbatch
from swerl.rl.tis import tis_weights

__all__ = ["ADVANTAGE_ESTIMATORS", "POLICY_LOSSES", "compute_advantages", "compute_policy_loss"]


AdvantageFn = Callable[[AlgorithmConfig, Tensor, Tensor, "Tensor | None"], tuple[Tensor, dict[str, float]]]
PolicyLossFn = Callable[[AlgorithmConfig, Tensor, Tensor, Tensor], pl.PolicyLossOutput]


def _rloo(config: AlgorithmConfig, rewards: Tensor, group_ids: Tensor, exclude: Tensor | None):  # noqa: ANN202
    return adv_fns.rloo(rewards, group_ids, exclude)


def _rloo_n(config: AlgorithmConfig, rewards: Tensor, group_ids: Tensor, exclude: Tensor | None):  # noqa: ANN202
    return adv_fns.rloo_n(rewards, group_ids, exclude, config.min_group_size, config.filter_zero_variance_groups)


def _grpo(config: AlgorithmConfig, rewards: Tensor, group_ids: Tensor, exclude: Tensor | None):  # noqa: ANN202
    return adv_fns.grpo(rewards, group_ids, exclude, config.grpo_std_eps)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {"rloo": _rloo, "rloo_n": _rloo_n, "grpo": _grpo}
"""``algorithm.advantage_estimator`` -> fn(config, rewards (N,), group_ids (N,), exclude (N,) | None)."""


def _regular(config: AlgorithmConfig, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor) -> pl.PolicyLossOutput:
    return pl.regular(logprobs, old_logprobs, advantages, config.eps_clip_low, config.eps_clip_high)


def _dual_clip(config: AlgorithmConfig, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor) -> pl.PolicyLossOutput:
    return pl.dual_clip(logprobs, old_logprobs, advantages, config.eps_clip_low, config.eps_clip_high,
                        config.clip_ratio_c)


POLICY_LOSSES: dict[str, PolicyLossFn] = {"regular": _regular, "dual_clip": _dual_clip}
"""``algorithm.policy_loss`` -> fn(config, logprobs (B, T), old_logprobs (B, T), advantages (B,))."""


def compute_advantages(
    config: AlgorithmConfig, rewards: Tensor, group_ids: Tensor, exclude: Tensor | None
) -> tuple[Tensor, dict[str, float]]:
    """Per-trajectory advantages with the configured estimator (algorithms.md §1).

    Args:
        config: validated AlgorithmConfig.
        rewards: (N,) float, finite. group_ids: (N,) int64 (see ``advantages.group_index``).
        exclude: (N,) bool ``exclude_from_baseline`` or None.
    Returns: (N,) float32 advantages and the ``advantage/*`` metrics.
    Raises: advantages.NonFiniteRewardError naming the trajectory with a NaN/inf reward.
    """
    return ADVANTAGE_ESTIMATORS[config.advantage_estimator](config, rewards, group_ids, exclude)


def compute_policy_loss(
    config: AlgorithmConfig,
    *,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    denominators: StepDenominators,
    rollout_logprobs: Tensor | None = None,
    has_rollout_logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The micro-batch's contribution to the step loss, ready for ``backward``.

    loss = reduce(w * l_policy) + kl_loss_coef * token_mean(k3) - entropy_coef * token_mean(H)
    where l_policy is ``regular``/``dual_clip``, w the TIS weight (1 when ``use_tis`` is off),
    ``reduce`` the configured reduction with the step's denominators, and the KL/entropy token
    means use the step's N_tok. Summing ``loss`` over every micro-batch of the step and every
    rank gives the step objective; before ``backward`` multiply by
    ``reductions.dp_loss_scale(world_size)`` when DDP/FSDP averages gradients.

    Args:
        config: validated AlgorithmConfig.
        logprobs: (B, T) float, current log pi of the sampled tokens at the sampling temperature
            (requires grad).
        old_logprobs: (B, T) float, log pi_old (weights that produced the batch), constant.
        advantages: (B,) float32 per trajectory (or (B, T)).
        loss_mask: (B, T) bool, True on model-generated tokens.
        denominators: StepDenominators summed over all micro-batches of the step and all-reduced
            (SUM) over ranks, from ``reductions.denominator_parts(loss_mask, advantages)``.
        rollout_logprobs: (B, T) float, sampler log mu of the sampled tokens, or None (all rows
            then get w = 1 and are counted as rows without log-probs).
        has_rollout_logprobs: (B,) bool, or None meaning "all rows have them" when
            ``rollout_logprobs`` is given.
        ref_logprobs: (B, T) float reference log-probs; required when ``use_kl_loss``.
        entropy: (B, T) float per-token entropy (``policy_loss.entropy_from_logits``, with grad);
            required when ``entropy_coef > 0``, logged when given.
    Returns: (loss, metrics). loss: scalar float32 tensor. metrics: python floats, each
        ADDITIVE: sum them over micro-batches and all-reduce-SUM over ranks to get the step
        value: ``loss/policy``, ``loss/total``, ``policy/clip_fraction`` and, if used,
        ``loss/kl``, ``policy/entropy``, ``tis/imp_ratio_mean``, ``tis/imp_ratio_capped_fraction``,
        ``tis/log_ratio_abs_mean`` (token means with N_tok of the step) and the count
        ``tis/rows_without_logprobs``.
    Raises: ValueError if a required input is missing or shapes disagree.
    """
    if logprobs.shape != old_logprobs.shape or logprobs.shape != loss_mask.shape:
        raise ValueError(
            f"shapes: logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)}, "
            f"loss_mask {tuple(loss_mask.shape)} must all be (B, T)"
        )
    mask = loss_mask.bool()
    n_tok = max(denominators.num_tokens, 1.0)
    # Off-mask positions (padding, prompt, observations) may hold -inf/NaN log-probs: replace them
    # before any arithmetic so that neither the value nor the gradient (0 * nan) can pick them up.
    logprobs = torch.where(mask, logprobs, 0.0)
    old_logprobs = torch.where(mask, old_logprobs, 0.0)
    if ref_logprobs is not None:
        ref_logprobs = torch.where(mask, ref_logprobs, 0.0)
    if entropy is not None:
        entropy = torch.where(mask, entropy, 0.0)
    out = POLICY_LOSSES[config.policy_loss](config, logprobs, old_logprobs, advantages)
    per_token = out.per_token_loss
    metrics: dict[str, float] = {"policy/clip_fraction": float((out.is_clipped & mask).sum()) / n_tok}

    if config.use_tis:
        batch = logprobs.shape[0]
        if rollout_logprobs is None:
            rollout_logprobs = torch.zeros_like(old_logprobs)
            has_rollout_logprobs = torch.zeros(batch, dtype=torch.bool, device=logprobs.device)
        elif has_rollout_logprobs is None:
            has_rollout_logprobs = torch.ones(batch, dtype=torch.bool, device=logprobs.device)
        tis = tis_weights(old_logprobs, rollout_logprobs, has_rollout_logprobs, mask, config.tis_imp_ratio_cap)
        per_token = per_token * tis.weights
        metrics["tis/imp_ratio_mean"] = float(masked_token_sum(tis.weights, mask)) / n_tok
        metrics["tis/imp_ratio_capped_fraction"] = float((tis.is_capped & mask).sum()) / n_tok
        metrics["tis/log_ratio_abs_mean"] = float(masked_token_sum(tis.log_ratio.abs(), mask)) / n_tok
        metrics["tis/rows_without_logprobs"] = tis.metrics["tis/rows_without_logprobs"]

    policy = reduce_microbatch(per_token, mask, denominators, config.loss_reduction, config.max_seq_len)
    loss = policy
    metrics["loss/policy"] = float(policy.detach())

    if config.use_kl_loss:
        if ref_logprobs is None:
            raise ValueError("use_kl_loss is true but no ref_logprobs were given")
        kl = masked_token_sum(pl.kl_k3(logprobs, ref_logprobs), mask) / n_tok
        loss = loss + config.kl_loss_coef * kl
        metrics["loss/kl"] = float(kl.detach())

    if config.entropy_coef > 0 and entropy is None:
        raise ValueError(f"entropy_coef={config.entropy_coef} > 0 but no per-token entropy was given")
    if entropy is not None:
        ent = masked_token_sum(entropy, mask) / n_tok
        metrics["policy/entropy"] = float(ent.detach())
        if config.entropy_coef > 0:
            loss = loss - config.entropy_coef * ent

    metrics["loss/total"] = float(loss.detach())
    return loss, metrics
