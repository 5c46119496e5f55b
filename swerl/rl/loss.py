"""One call for the trainer: per-token policy loss + TIS + step-level reduction (+ KL, entropy)
for one micro-batch, and the config-driven advantage dispatch.

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
from swerl.rl.config import AlgorithmConfig
from swerl.rl.reductions import StepDenominators, masked_token_sum, reduce_microbatch
from swerl.rl.tis import tis_weights

__all__ = ["ADVANTAGE_ESTIMATORS", "POLICY_LOSSES", "compute_advantages", "compute_policy_loss"]


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


def compute_policy_loss(
    config: AlgorithmConfig, *, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, loss_mask: Tensor,
    denominators: StepDenominators, rollout_logprobs: Tensor | None = None,
    has_rollout_logprobs: Tensor | None = None, ref_logprobs: Tensor | None = None, entropy: Tensor | None = None,
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
    _check_shapes(logprobs, old_logprobs, loss_mask)
    mask = loss_mask.bool()
    n_tok = max(denominators.num_tokens, 1.0)
    # Off-mask positions (padding, prompt, observations) may hold -inf/NaN log-probs: replace them
    # before any arithmetic so that neither the value nor the gradient (0 * nan) can pick them up.
    logprobs, old_logprobs, ref_logprobs, entropy = (
        None if t is None else torch.where(mask, t, 0.0) for t in (logprobs, old_logprobs, ref_logprobs, entropy))
    policy_loss = POLICY_LOSSES[config.policy_loss]
    out = policy_loss.fn(logprobs, old_logprobs, advantages, *policy_loss.args(config))
    per_token = out.per_token_loss
    metrics: dict[str, float] = {"policy/clip_fraction": float((out.is_clipped & mask).sum()) / n_tok}
    if config.use_tis:
        weights, tis_metrics = _tis(config, old_logprobs, rollout_logprobs, has_rollout_logprobs, mask, n_tok)
        per_token = per_token * weights
        metrics.update(tis_metrics)

    policy = reduce_microbatch(per_token, mask, denominators, config.loss_reduction, config.max_seq_len)
    metrics["loss/policy"] = float(policy.detach())
    loss = _add_regularizers(policy, config, logprobs, ref_logprobs, entropy, mask, n_tok, metrics)
    metrics["loss/total"] = float(loss.detach())
    return loss, metrics


def _check_shapes(logprobs: Tensor, old_logprobs: Tensor, loss_mask: Tensor) -> None:
    if logprobs.shape != old_logprobs.shape or logprobs.shape != loss_mask.shape:
        raise ValueError(
            f"shapes: logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)}, "
            f"loss_mask {tuple(loss_mask.shape)} must all be (B, T)"
        )


def _tis(
    config: AlgorithmConfig, old_logprobs: Tensor, rollout_logprobs: Tensor | None,
    has_rollout_logprobs: Tensor | None, mask: Tensor, n_tok: float,
) -> tuple[Tensor, dict[str, float]]:
    """TIS weights (B, T) for the per-token loss and the additive ``tis/*`` metrics (see above)."""
    batch = old_logprobs.shape[0]
    if rollout_logprobs is None:
        rollout_logprobs = torch.zeros_like(old_logprobs)
        has_rollout_logprobs = torch.zeros(batch, dtype=torch.bool, device=old_logprobs.device)
    elif has_rollout_logprobs is None:
        has_rollout_logprobs = torch.ones(batch, dtype=torch.bool, device=old_logprobs.device)
    tis = tis_weights(old_logprobs, rollout_logprobs, has_rollout_logprobs, mask, config.tis_imp_ratio_cap)
    return tis.weights, {
        "tis/imp_ratio_mean": float(masked_token_sum(tis.weights, mask)) / n_tok,
        "tis/imp_ratio_capped_fraction": float((tis.is_capped & mask).sum()) / n_tok,
        "tis/log_ratio_abs_mean": float(masked_token_sum(tis.log_ratio.abs(), mask)) / n_tok,
        "tis/rows_without_logprobs": tis.metrics["tis/rows_without_logprobs"],
    }


def _add_regularizers(
    loss: Tensor, config: AlgorithmConfig, logprobs: Tensor, ref_logprobs: Tensor | None,
    entropy: Tensor | None, mask: Tensor, n_tok: float, metrics: dict[str, float],
) -> Tensor:
    """``loss + kl_loss_coef * token_mean(k3) - entropy_coef * token_mean(H)`` (each term only when
    on); adds ``loss/kl`` and ``policy/entropy`` to ``metrics`` when computed."""
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
    return loss
