"""Rollout corrections: per-token weights for the sampler/trainer mismatch rho = pi_old / mu, at
token, sequence or geometric-mean level, truncated or masked.

Stage: ``rl/``. A weight multiplies the per-token policy loss after clipping and before the
reduction; it never touches a denominator, the KL or the entropy term, so a masked token or row
weighs 0 in the numerator and still counts in the step's denominators (open-instruct and prime-rl
do the same; verl's rejection also removes it from the denominator). Every function runs under
``torch.no_grad`` in float32 and compares bounds in log space, so trainer -2.0 vs sampler -91.0
stays finite. With delta_t = log pi_old - log mu on the trainable tokens of a row:

- token level: rho_t = exp(delta_t);
- sequence level: rho_seq = exp(S_i), S_i = sum_t clamp(delta_t, -20, 20) over the row's
  trainable tokens (each term clamped so +inf and -inf never meet);
- geometric level: rho_geo = exp(S_i / n_i), n_i the row's trainable tokens.

Every exponent is clamped to [-20, 20] before ``exp``. A row without sampler log-probs gets weight
1 and is never capped or masked (``tis/rows_without_logprobs`` counts it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from swerl import metric_keys
from swerl.rl.config import RolloutCorrectionConfig
from swerl.rl.policy_loss import LOG_RATIO_CLAMP
from swerl.rl.reductions import masked_token_sum

__all__ = ["CORRECTIONS", "LAG_BUCKETS", "CorrectionOutput", "CorrectionTerm", "correction_term", "lag_means",
           "sequence_log_ratio", "token_log_ratio"]


class CorrectionOutput(NamedTuple):
    """Weights of one correction and what they did.

    Attributes:
        weights: (B, T) float32, detached, >= 0; exactly 1 on rows without rollout log-probs.
        log_ratio: (B, T) float32, the level's log-ratio clamped to [-20, 20] (delta_t, or the row's
            S_i or S_i / n_i on each of its tokens); 0 on rows without rollout log-probs.
        is_capped: (B, T) bool, truncation lowered the weight (rho > high).
        is_masked: (B, T) bool, trainable tokens the mask set to 0 (rho outside [low, high]).
    """

    weights: Tensor
    log_ratio: Tensor
    is_capped: Tensor
    is_masked: Tensor


def _valid(has_rollout_logprobs: Tensor, loss_mask: Tensor) -> Tensor:
    """(B, T) bool: trainable tokens of rows that have sampler log-probs."""
    return has_rollout_logprobs.bool().unsqueeze(-1) & loss_mask.bool()


def token_log_ratio(old_logprobs: Tensor, rollout_logprobs: Tensor, valid: Tensor) -> Tensor:
    """delta_t = log pi_old - log mu in float32 where ``valid``, 0 elsewhere (not clamped).

    Args: old_logprobs, rollout_logprobs: (B, T) float; valid: (B, T) bool.
    Returns: (B, T) float32; +-inf where a log-prob is infinite on a valid token.
    """
    raw = old_logprobs.detach().float() - rollout_logprobs.detach().float()
    return torch.where(valid, raw, 0.0)


def sequence_log_ratio(delta: Tensor, valid: Tensor, geometric: bool) -> Tensor:
    """The row's log-ratio S_i = sum_t clamp(delta_t, -20, 20) over valid tokens, or S_i / n_i.

    Args: delta (B, T) float32 from :func:`token_log_ratio`; valid (B, T) bool; geometric: divide
        by n_i = the row's valid tokens (max 1).
    Returns: (B, 1) float32, finite, not clamped (|S_i| <= 20 n_i).
    """
    total = torch.where(valid, delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), 0.0).sum(dim=-1, keepdim=True)
    if geometric:
        total = total / valid.sum(dim=-1, keepdim=True).clamp(min=1)
    return total


def _inside(log_rho: Tensor, low: float, high: float) -> Tensor:
    """log_rho in [log low, log high] (False for NaN)."""
    return (log_rho >= math.log(low)) & (log_rho <= math.log(high))


def _output(weights: Tensor, log_rho: Tensor, has: Tensor, valid: Tensor, capped: Tensor, kept: Tensor
            ) -> CorrectionOutput:
    """Rows without sampler log-probs get weight 1 and log-ratio 0; flags only on valid tokens."""
    rows = has.bool().unsqueeze(-1).expand_as(valid)
    clamped = log_rho.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).expand_as(valid)
    return CorrectionOutput(
        weights=torch.where(rows, weights.expand_as(valid), 1.0),
        log_ratio=torch.where(rows, clamped, 0.0),
        is_capped=valid & capped.expand_as(valid),
        is_masked=valid & ~kept.expand_as(valid),
    )


def _masked_importance(log_rho: Tensor, has: Tensor, valid: Tensor, low: float, high: float) -> CorrectionOutput:
    """Weight exp(log_rho) where low <= exp(log_rho) <= high, else 0 (log_rho: (B, T) or (B, 1))."""
    kept = _inside(log_rho, low, high)
    weights = torch.where(kept, torch.exp(log_rho.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)), 0.0)
    return _output(weights, log_rho, has, valid, torch.zeros_like(kept), kept)


@torch.no_grad()
def token_truncate(old_logprobs: Tensor, rollout_logprobs: Tensor, has_rollout_logprobs: Tensor,
                   loss_mask: Tensor, high: float, low: float) -> CorrectionOutput:
    """Token-level truncated importance sampling (TIS): w_t = min(rho_t, high), no lower bound
    (``low`` unused).

    Formula: w_t = min(exp(clamp(log pi_old_t - log mu_t, -20, 20)), C) on rows with rollout
    log-probs, w_t = 1 on rows without. Masked with ``torch.where`` (never 0 * inf), so trainer
    -2.0 vs sampler -91.0 gives w = C, finite; values of ``rollout_logprobs`` on rows without
    log-probs are ignored (they may be 0, NaN or garbage).

    Args: old_logprobs, rollout_logprobs (B, T) float; has_rollout_logprobs (B,) bool; loss_mask
        (B, T) bool; high: the cap C > 0 (seed run 2.0).
    Returns: CorrectionOutput (is_masked all False); ``log_ratio`` holds delta_t on every token of
        a row with rollout log-probs.
    Raises: ValueError if high <= 0 or the shapes disagree.
    Source: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL
        Training" (fengyao.notion.site/off-policy-rl); verl ``rollout_is: token``.
    """
    if high <= 0:
        raise ValueError(f"TIS cap must be > 0, got {high}")
    if old_logprobs.shape != rollout_logprobs.shape or has_rollout_logprobs.shape != old_logprobs.shape[:1]:
        raise ValueError(
            f"shapes: old_logprobs {tuple(old_logprobs.shape)}, rollout_logprobs "
            f"{tuple(rollout_logprobs.shape)}, has_rollout_logprobs {tuple(has_rollout_logprobs.shape)}"
        )
    has = has_rollout_logprobs.bool().unsqueeze(-1).expand_as(old_logprobs)
    raw = old_logprobs.detach().float() - rollout_logprobs.detach().float()
    delta = torch.where(has, raw, 0.0).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(delta)
    weights = torch.where(has, ratio.clamp(max=high), 1.0)
    valid = _valid(has_rollout_logprobs, loss_mask)
    return CorrectionOutput(weights, delta, valid & (ratio > high), torch.zeros_like(valid))


@torch.no_grad()
def sequence_truncate(old_logprobs: Tensor, rollout_logprobs: Tensor, has_rollout_logprobs: Tensor,
                      loss_mask: Tensor, high: float, low: float) -> CorrectionOutput:
    """Sequence-level TIS: every token of row i gets w_i = min(rho_seq_i, high) (``low`` unused).

    Args/Returns: as :func:`token_truncate`.
    Source: verl ``rollout_is: sequence`` (preset ``decoupled_seq_is``); SkyRL
        ``tis_ratio_type: sequence``; Liu, Li et al. 2025, "When Speed Kills Stability"
        (richardli.xyz/rl-collapse).
    """
    valid = _valid(has_rollout_logprobs, loss_mask)
    s = sequence_log_ratio(token_log_ratio(old_logprobs, rollout_logprobs, valid), valid, geometric=False)
    rho = torch.exp(s.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    capped = s > math.log(high)
    return _output(rho.clamp(max=high), s, has_rollout_logprobs, valid, capped, torch.ones_like(capped))


@torch.no_grad()
def token_mask(old_logprobs: Tensor, rollout_logprobs: Tensor, has_rollout_logprobs: Tensor,
               loss_mask: Tensor, high: float, low: float) -> CorrectionOutput:
    """IcePop: w_t = rho_t if low <= rho_t <= high, else 0 (the token leaves the numerator).

    Args/Returns: as :func:`token_truncate`, plus low: the lower bound (0 < low <= 1 <= high).
    Source: Ling Team 2025, "Every Step Evolves: Scaling RL for Trillion-Scale Thinking Model"
        (IcePop, arxiv 2510.18855); open-instruct ``rho_mask_lower_bound``/``rho_mask_upper_bound``;
        prime-rl ``mask_ratio_low``/``mask_ratio_high``; verl ``rollout_rs: token``.
    """
    valid = _valid(has_rollout_logprobs, loss_mask)
    delta = token_log_ratio(old_logprobs, rollout_logprobs, valid)
    return _masked_importance(delta, has_rollout_logprobs, valid, low, high)


@torch.no_grad()
def sequence_mask(old_logprobs: Tensor, rollout_logprobs: Tensor, has_rollout_logprobs: Tensor,
                  loss_mask: Tensor, high: float, low: float) -> CorrectionOutput:
    """Sequence-level MIS: w_i = rho_seq_i if low <= rho_seq_i <= high, else 0 for the whole row.

    Args/Returns: as :func:`token_mask`.
    Source: Liu, Li et al. 2025, "When Speed Kills Stability", part 3 (sequence-level masked IS,
        richardli.xyz/rl-collapse-3); verl preset ``decoupled_seq_is_rs`` (sequence IS + sequence
        rejection); SkyRL ``sequence_mask_metric: product``.
    """
    valid = _valid(has_rollout_logprobs, loss_mask)
    s = sequence_log_ratio(token_log_ratio(old_logprobs, rollout_logprobs, valid), valid, geometric=False)
    return _masked_importance(s, has_rollout_logprobs, valid, low, high)


@torch.no_grad()
def geometric_mask(old_logprobs: Tensor, rollout_logprobs: Tensor, has_rollout_logprobs: Tensor,
                   loss_mask: Tensor, high: float, low: float) -> CorrectionOutput:
    """Geometric-mean rejection: w_i = 1 if low <= rho_geo_i <= high, else 0 (no IS weight); the
    geometric mean does not grow with the row's length, so long rows are not rejected for it.

    Args/Returns: as :func:`token_mask` (typical bounds: high 1.0002-1.001).
    Source: Liu, Li et al. 2025, "When Speed Kills Stability", part 3 (geometric-level rejection);
        verl preset ``decoupled_geo_rs`` (``rollout_rs: geometric``); SkyRL
        ``sequence_mask_metric: geometric``.
    """
    valid = _valid(has_rollout_logprobs, loss_mask)
    g = sequence_log_ratio(token_log_ratio(old_logprobs, rollout_logprobs, valid), valid, geometric=True)
    kept = _inside(g, low, high)
    return _output(kept.float(), g, has_rollout_logprobs, valid, torch.zeros_like(kept), kept)


Correction = Callable[[Tensor, Tensor, Tensor, Tensor, float, float], CorrectionOutput]

CORRECTIONS: dict[tuple[str, str], Correction] = {
    ("token", "truncate"): token_truncate,
    ("sequence", "truncate"): sequence_truncate,
    ("token", "mask"): token_mask,
    ("sequence", "mask"): sequence_mask,
    ("geometric", "mask"): geometric_mask,
}
"""(``rollout_correction.level``, ``.mode``) -> fn(old_logprobs, rollout_logprobs,
has_rollout_logprobs, loss_mask, high, low); geometric/truncate is rejected by the config."""


class CorrectionTerm(NamedTuple):
    """The configured correction on one micro-batch: its weights and its additive ``tis/*`` metrics.

    Attributes:
        weights: (B, T) float32, detached (``CorrectionOutput.weights``).
        sums: key -> 0-dim float64 tensor, summed as they are: ``tis/rows_without_logprobs`` and the
            per-lag parts that :func:`lag_means` turns into means.
        token_means: key -> 0-dim float64 tensor, divided by the step's N_tok: ``tis/imp_ratio_mean``
            (the weight), ``tis/ratio_mean`` (the ratio before its bound), ``tis/log_ratio_abs_mean``,
            ``tis/imp_ratio_capped_fraction`` (truncate) or ``tis/masked_fraction`` and
            ``tis/masked_neg_adv_fraction`` (mask), and ``tis/log_truncation_mass``.
    """

    weights: Tensor
    sums: dict[str, Tensor]
    token_means: dict[str, Tensor]


LAG_BUCKETS: tuple[tuple[str, int, int | None], ...] = (("0", 0, 0), ("1", 1, 1), ("2", 2, 2), ("3plus", 3, None))
"""Version-lag buckets (name, lowest lag, highest lag or None) of ``tis/log_ratio_abs_mean_lag{name}``:
lag 0 is the sampler/trainer mismatch at equal weights, a larger lag adds staleness."""


@torch.no_grad()
def correction_term(
    correction: RolloutCorrectionConfig, old_logprobs: Tensor, rollout_logprobs: Tensor | None,
    has_rollout_logprobs: Tensor | None, mask: Tensor, advantages: Tensor, n_tok: float,
    log_mass: Tensor | None = None, version_lag: Tensor | None = None,
) -> CorrectionTerm:
    """The configured correction's weights and metrics, the ratio's parts (:func:`_lag_parts`) included.

    Args: old_logprobs (B, T) float; rollout_logprobs (B, T) float or None (every row gets w = 1,
        counted); has_rollout_logprobs (B,) bool or None (every row has them); mask (B, T) bool;
        advantages (B,) or (B, T) float; n_tok: the step's trainable tokens (max 1); log_mass (B, T)
        float log S_t or None; version_lag (B, T) int64 or None.
    Returns: CorrectionTerm.
    """
    batch = old_logprobs.shape[0]
    if rollout_logprobs is None:
        rollout_logprobs = torch.zeros_like(old_logprobs)
        has_rollout_logprobs = torch.zeros(batch, dtype=torch.bool, device=old_logprobs.device)
    elif has_rollout_logprobs is None:
        has_rollout_logprobs = torch.ones(batch, dtype=torch.bool, device=old_logprobs.device)
    fn = CORRECTIONS[(correction.level, correction.mode)]
    out = fn(old_logprobs, rollout_logprobs, has_rollout_logprobs, mask, correction.high, correction.lower_bound)
    means = {
        metric_keys.TIS_IMP_RATIO_MEAN: masked_token_sum(out.weights, mask).double() / n_tok,
        metric_keys.TIS_RATIO_MEAN: masked_token_sum(torch.exp(out.log_ratio), mask).double() / n_tok,
        metric_keys.TIS_LOG_RATIO_ABS_MEAN: masked_token_sum(out.log_ratio.abs(), mask).double() / n_tok,
        metric_keys.TIS_LOG_TRUNCATION_MASS: (
            torch.zeros((), dtype=torch.float64, device=mask.device) if log_mass is None
            else masked_token_sum(log_mass.float(), mask).double() / n_tok),
    }
    if correction.mode == "truncate":
        means[metric_keys.TIS_IMP_RATIO_CAPPED_FRACTION] = (out.is_capped & mask).sum().double() / n_tok
    else:
        adv = advantages.float().unsqueeze(-1) if advantages.dim() == 1 else advantages.float()
        means[metric_keys.TIS_MASKED_FRACTION] = (out.is_masked & mask).sum().double() / n_tok
        means[metric_keys.TIS_MASKED_NEG_ADV_FRACTION] = (out.is_masked & mask & (adv < 0)).sum().double() / n_tok
    sums = {metric_keys.TIS_ROWS_WITHOUT_LOGPROBS: (~has_rollout_logprobs.bool()).sum().double(),
            **_lag_parts(old_logprobs, rollout_logprobs, has_rollout_logprobs, mask, version_lag)}
    return CorrectionTerm(out.weights, sums, means)


def _lag_parts(old_logprobs: Tensor, rollout_logprobs: Tensor, has_rollout_logprobs: Tensor, mask: Tensor,
               version_lag: Tensor | None) -> dict[str, Tensor]:
    """The ratio pi_old / mu taken apart per lag bucket (additive, float64): the trainable tokens
    with sampler log-probs, ``tis/lag{b}_tokens``, and their summed |log pi_old - log mu|,
    ``tis/lag{b}_log_ratio_abs_sum``; all 0 without ``version_lag``."""
    valid = mask & has_rollout_logprobs.bool().unsqueeze(-1)
    if version_lag is None:
        valid = torch.zeros_like(mask)
    lag = version_lag if version_lag is not None else torch.full_like(mask, -1, dtype=torch.int64)
    delta = torch.where(valid, (old_logprobs.detach().float() - rollout_logprobs.float()).abs(), 0.0)
    out = {}
    for name, low, high in LAG_BUCKETS:
        bucket = valid & (lag >= low) & ((lag <= high) if high is not None else True)
        out[f"tis/lag{name}_tokens"] = bucket.sum().double()
        out[f"tis/lag{name}_log_ratio_abs_sum"] = torch.where(bucket, delta, 0.0).sum().double()
    return out


def lag_means(summed: dict[str, float]) -> dict[str, float]:
    """``tis/log_ratio_abs_mean_lag{b}`` (mean |log pi_old - log mu| over the tokens sampled ``b``
    versions behind the trained weights) from the step's summed ``tis/lag{b}_*`` parts, which it
    removes; a bucket without tokens is left out. Lag 0 is also ``tis/mismatch_log_ratio_abs_mean``.

    Args: summed: metrics summed over the step's micro-batches and ranks, read as floats.
    Returns: a copy of ``summed`` with the means instead of the parts.
    """
    out = dict(summed)
    for name, _, _ in LAG_BUCKETS:
        tokens = out.pop(f"tis/lag{name}_tokens", 0.0)
        total = out.pop(f"tis/lag{name}_log_ratio_abs_sum", 0.0)
        if tokens > 0:
            out[f"{metric_keys.TIS_LOG_RATIO_ABS_MEAN_LAG_PREFIX}{name}"] = total / tokens
    lag0 = f"{metric_keys.TIS_LOG_RATIO_ABS_MEAN_LAG_PREFIX}0"
    if lag0 in out:
        out[metric_keys.TIS_MISMATCH_LOG_RATIO_ABS_MEAN] = out[lag0]
    return out
