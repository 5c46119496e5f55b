"""One call for the trainer: per-token policy loss + rollout correction + step-level reduction
(+ KL to the reference, entropy) for one micro-batch, and the config-driven advantage dispatch.

Stage: ``rl/``; called by ``trainer/`` once per micro-batch. Pure: ``LossInputs`` and a config
in, ``LossOutputs`` (a scalar loss and additive metric tensors) out; no distributed calls (the
trainer all-reduces the denominators and the metrics, and cancels the framework's gradient
averaging, see ``reductions.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from swerl import metric_keys
from swerl.rl import advantages as adv_fns
from swerl.rl import policy_loss as pl
from swerl.rl import sequence_loss
from swerl.rl.config import AlgorithmConfig
from swerl.rl.kl import KL_ESTIMATORS, kl_k3
from swerl.rl.reductions import StepDenominators, masked_token_sum, reduce_microbatch
from swerl.rl.rollout_correction import correction_term

__all__ = ["ADVANTAGE_ESTIMATORS", "POLICY_LOSSES", "LossInputs", "LossOutputs", "ReportedKeys", "compute_advantages",
           "compute_policy_loss", "kl_share", "reported_metric_keys"]


class Registered(NamedTuple):
    """A registry entry: a pure function and the ``AlgorithmConfig`` fields it takes after its tensors."""

    fn: Callable[..., Any]
    params: tuple[str, ...]
    with_mask: bool = False
    """The function takes the (B, T) bool loss mask after its tensors (GSPO's n_i)."""

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
    "gspo": Registered(sequence_loss.gspo, ("eps_clip_low", "eps_clip_high"), with_mask=True),
    "cispo": Registered(sequence_loss.cispo, ("eps_clip_low", "eps_clip_high")),
}
"""``algorithm.policy_loss`` -> fn(logprobs (B, T), old_logprobs (B, T), advantages (B,)[, loss_mask (B, T)],
*params)."""


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


@dataclass(frozen=True)
class LossInputs:
    """One micro-batch's tensors for :func:`compute_policy_loss`: B rows of T next-token columns
    (the trainer's (n, L-1) grid), all on one device. Off-mask positions may hold anything
    (-inf, NaN): the loss reads no value there.

    Attributes:
        logprobs: (B, T) float32, log pi of the sampled tokens at the sampling temperature (with grad).
        old_logprobs: (B, T) float32, log pi_old (the weights that produced the batch), constant.
        advantages: (B,) float32 per trajectory (or (B, T)).
        loss_mask: (B, T) bool, True on model-generated tokens.
        rollout_logprobs: (B, T) float32, the sampler's log mu, or None (every row gets w = 1, counted).
        has_rollout_logprobs: (B,) bool, or None = "every row has them" when ``rollout_logprobs`` is given.
        ref_logprobs: (B, T) float32, log pi_ref of the reference policy at the sampling temperature,
            or None; required when ``use_kl_loss``.
        entropy: (B, T) float32 per-token entropy (``policy_loss.entropy_from_logits``, with grad), or
            None; required when ``entropy_coef > 0``, logged when given.
        log_truncation_mass: (B, T) float32 log S_t under pi_old (``rl.support``), or None (0).
        version_lag: (B, T) int64 policy versions between each token's sampling weights and pi_old
            (-1 unknown), or None (no lag bucket counts the token).
    """

    logprobs: Tensor
    old_logprobs: Tensor
    advantages: Tensor
    loss_mask: Tensor
    rollout_logprobs: Tensor | None = None
    has_rollout_logprobs: Tensor | None = None
    ref_logprobs: Tensor | None = None
    entropy: Tensor | None = None
    log_truncation_mass: Tensor | None = None
    version_lag: Tensor | None = None


@dataclass(frozen=True)
class LossOutputs:
    """One micro-batch's contribution to the step.

    Attributes:
        loss: scalar float32 tensor with grad, ready for ``backward`` (times ``reductions.dp_loss_scale``).
        metrics: key -> 0-dim float64 tensor on the inputs' device, detached. Each is ADDITIVE: summed
            over the step's micro-batches and all-reduce-SUMMED over ranks it is the step value
            (:func:`kl_share` and ``rollout_correction.lag_means`` derive more). Kept as tensors so
            the trainer reads them (``float``) once, after that all-reduce: each read is a device sync.
        token_means: the keys of ``metrics`` that are token means over the step's N_tok and that the
            trainer turns into means over the tokens it forwarded; the others are reported as summed
            (``policy/clip_fraction`` and ``policy/entropy`` stay shares of all the step's tokens).
    """

    loss: Tensor
    metrics: dict[str, Tensor]
    token_means: frozenset[str]


class ReportedKeys(NamedTuple):
    """The metric keys :func:`compute_policy_loss` reports under one config (every micro-batch, every rank)."""

    all: frozenset[str]
    token_means: frozenset[str]
    """The subset that ``LossOutputs.token_means`` names."""


KL_REDUCTION = {"seq_mean_token_sum_norm_global": "seq_mean_token_sum_norm"}
"""The KL term's reduction where it differs from ``loss_reduction``: the global mode counts the rows
whose advantage is non-zero, and the KL term carries signal on every row."""


def compute_policy_loss(config: AlgorithmConfig, inputs: LossInputs, denominators: StepDenominators) -> LossOutputs:
    """The micro-batch's contribution to the step loss, ready for ``backward``.

    loss = reduce(w * l_policy) + kl_loss_coef * reduce_kl(kl) - entropy_coef * token_mean(H):
    l_policy is the configured ``policy_loss``, w the rollout correction's weight (1 without one),
    ``reduce`` the configured reduction with the step's denominators, ``reduce_kl`` the same but
    counting every nonempty row in the global mode (``KL_REDUCTION``), kl the ``kl_estimator``.
    Summed over the step's micro-batches and ranks it is the step objective; before ``backward``
    multiply by ``reductions.dp_loss_scale(world_size)`` when DDP/FSDP averages gradients.

    Args:
        config: validated AlgorithmConfig.
        inputs: the micro-batch's tensors (shapes in :class:`LossInputs`).
        denominators: ``reductions.denominator_parts`` summed over the step's micro-batches and ranks.
    Returns: LossOutputs; its metric keys are :func:`reported_metric_keys` ``(config)``.
    Raises: ValueError if a required input is missing or shapes disagree.
    """
    _check_shapes(inputs.logprobs, inputs.old_logprobs, inputs.loss_mask)
    mask = inputs.loss_mask.bool()
    n_tok = max(denominators.num_tokens, 1.0)
    # Off-mask positions (padding, prompt, observations) may hold -inf/NaN log-probs: replace them
    # before any arithmetic so that neither the value nor the gradient (0 * nan) can pick them up.
    logprobs, old_logprobs, rollout_logprobs, ref_logprobs, entropy = (
        None if t is None else torch.where(mask, t, 0.0)
        for t in (inputs.logprobs, inputs.old_logprobs, inputs.rollout_logprobs, inputs.ref_logprobs, inputs.entropy))
    out = _policy_loss(config, logprobs, old_logprobs, inputs.advantages, mask)
    per_token = out.per_token_loss
    metrics = {metric_keys.POLICY_CLIP_FRACTION: (out.is_clipped & mask).sum().double() / n_tok}
    token_means: set[str] = set()
    correction = config.correction
    if correction is not None:
        term = correction_term(correction, old_logprobs, rollout_logprobs, inputs.has_rollout_logprobs, mask,
                               inputs.advantages, n_tok, inputs.log_truncation_mass, inputs.version_lag)
        per_token = per_token * term.weights
        metrics.update(term.sums | term.token_means)
        token_means |= term.token_means.keys()
    policy = reduce_microbatch(per_token, mask, denominators, config.loss_reduction, config.max_seq_len)
    metrics[metric_keys.LOSS_POLICY] = policy.detach().double()
    loss = policy
    if config.use_kl_loss:
        kl, kl_sums, kl_means = _kl_term(config, logprobs, ref_logprobs, per_token, mask, denominators, n_tok)
        loss = loss + kl
        metrics.update(kl_sums | kl_means)
        token_means |= kl_means.keys()
    loss = _add_entropy(loss, config, entropy, mask, n_tok, metrics)
    metrics[metric_keys.LOSS_TOTAL] = loss.detach().double()
    return LossOutputs(loss, metrics, frozenset(token_means))


def reported_metric_keys(config: AlgorithmConfig) -> ReportedKeys:
    """The metric keys :func:`compute_policy_loss` reports under ``config``, whatever its inputs.

    Read off a call on one row of zero tokens with every optional input given (the entropy only
    when the bonus is on: the trainer computes it only then), so that each term's keys are written
    once, where the term computes them.
    """
    empty = torch.zeros(1, 0)
    inputs = LossInputs(empty, empty, torch.zeros(1), empty.bool(), rollout_logprobs=empty, ref_logprobs=empty,
                        entropy=empty if config.entropy_coef > 0 else None, log_truncation_mass=empty,
                        version_lag=empty.long())
    out = compute_policy_loss(config, inputs, StepDenominators.zero())
    return ReportedKeys(frozenset(out.metrics), out.token_means)


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
    term = abs(kl_loss_coef * summed[metric_keys.LOSS_KL])
    total = term + summed[metric_keys.LOSS_POLICY_ABS]
    return term / total if total > 0 else 0.0


def _check_shapes(logprobs: Tensor, old_logprobs: Tensor, loss_mask: Tensor) -> None:
    if logprobs.shape != old_logprobs.shape or logprobs.shape != loss_mask.shape:
        raise ValueError(
            f"shapes: logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)}, "
            f"loss_mask {tuple(loss_mask.shape)} must all be (B, T)"
        )


def _policy_loss(config: AlgorithmConfig, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor,
                 mask: Tensor) -> pl.PolicyLossOutput:
    """The configured ``policy_loss`` on masked inputs (GSPO also takes the mask: its n_i)."""
    registered = POLICY_LOSSES[config.policy_loss]
    with_mask = (mask,) if registered.with_mask else ()
    return registered.fn(logprobs, old_logprobs, advantages, *with_mask, *registered.args(config))


def _kl_term(
    config: AlgorithmConfig, logprobs: Tensor, ref_logprobs: Tensor | None, policy_per_token: Tensor, mask: Tensor,
    denominators: StepDenominators, n_tok: float,
) -> tuple[Tensor, dict[str, Tensor], dict[str, Tensor]]:
    """``kl_loss_coef * reduce_kl(kl_estimator(log pi, log pi_ref))``, its summed metrics ``loss/kl``
    (the reduced estimate) and ``loss/policy_abs`` (the reduced |w * l_policy|, for :func:`kl_share`),
    and its token mean ``policy/kl_ref_mean`` (of k3 whatever the estimator, so arms compare on one scale)."""
    if ref_logprobs is None:
        raise ValueError("use_kl_loss is true but no ref_logprobs were given")
    per_token = KL_ESTIMATORS[config.kl_estimator](logprobs, ref_logprobs)
    reduction = KL_REDUCTION.get(config.loss_reduction, config.loss_reduction)
    kl = reduce_microbatch(per_token, mask, denominators, reduction, config.max_seq_len)
    with torch.no_grad():
        policy_abs = reduce_microbatch(policy_per_token.abs(), mask, denominators, config.loss_reduction,
                                       config.max_seq_len)
        sums = {metric_keys.LOSS_KL: kl.double(), metric_keys.LOSS_POLICY_ABS: policy_abs.double()}
        means = {metric_keys.POLICY_KL_REF_MEAN: masked_token_sum(kl_k3(logprobs, ref_logprobs), mask).double() / n_tok}
    return config.kl_loss_coef * kl, sums, means


def _add_entropy(
    loss: Tensor, config: AlgorithmConfig, entropy: Tensor | None, mask: Tensor, n_tok: float,
    metrics: dict[str, Tensor],
) -> Tensor:
    """``loss - entropy_coef * token_mean(H)`` when the bonus is on; adds ``policy/entropy`` to
    ``metrics`` whenever an entropy is given."""
    if config.entropy_coef > 0 and entropy is None:
        raise ValueError(f"entropy_coef={config.entropy_coef} > 0 but no per-token entropy was given")
    if entropy is not None:
        ent = masked_token_sum(entropy, mask) / n_tok
        metrics[metric_keys.POLICY_ENTROPY] = ent.detach().double()
        if config.entropy_coef > 0:
            loss = loss - config.entropy_coef * ent
    return loss
