"""Advantage estimators: one scalar A_i per trajectory from outcome rewards and group ids.

Stage: ``rl/``, after rollouts are scored by the verifier and before the loss.
Every estimator takes

- ``rewards``: (N,) float, one verifier reward per trajectory,
- ``group_ids``: (N,) int64, the group (prompt ``uid``) of each trajectory, in ANY order
  (rows of one group need not be contiguous; the result is permutation invariant),
- ``exclude``: (N,) bool or None, ``exclude_from_baseline`` (infrastructure failures,
  docs/tasks.md, Failure classes); excluded rows get A = 0 and are left out of every group statistic,

and returns ``(advantages, metrics)``: (N,) float32 and a dict with
``advantage/zero_variance_groups``, ``advantage/below_min_groups``,
``advantage/excluded_rows`` (counts) and ``advantage/mean_abs`` (mean |A| over all N rows).
A group whose rows are all excluded has no baseline: it counts in ``below_min_groups``.
Group statistics are computed in float64 and a zero-variance group gets exactly 0, so that
fp32 residue never creates a spurious non-zero advantage (which would also change the
``seq_mean_token_sum_norm_global`` denominator).

Spec: ``docs/algorithms.md`` (Advantages).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from swerl import metric_keys
from swerl.text import counted

__all__ = [
    "NonFiniteRewardError",
    "group_index",
    "rloo",
    "rloo_n",
    "grpo",
]


class NonFiniteRewardError(ValueError):
    """A reward is NaN or infinite: a bug upstream (verifier parsing), never fed to the loss."""


class _Groups(NamedTuple):
    inverse: Tensor  # (N,) int64 in [0, G)
    num_groups: int
    rewards: Tensor  # (N,) float64, excluded rows zeroed
    included: Tensor  # (N,) bool
    count: Tensor  # (G,) float64, included rows per group
    mean: Tensor  # (G,) float64, mean reward over included rows (0 when empty)
    all_equal: Tensor  # (G,) bool, included rewards all exactly equal (True when empty)


def group_index(group_ids: Sequence[str]) -> Tensor:
    """Map string group ids (``Trajectory.group_id``) to (N,) int64 ids, first appearance = 0.

    Args:    group_ids: N strings.
    Returns: (N,) int64.
    """
    seen: dict[str, int] = {}
    return torch.tensor([seen.setdefault(g, len(seen)) for g in group_ids], dtype=torch.int64)


def _check_inputs(rewards: Tensor, group_ids: Tensor, exclude: Tensor | None) -> Tensor:
    """Validate shapes and finiteness; return the (N,) bool exclusion mask."""
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both be (N,), got {tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    bad = (~torch.isfinite(rewards)).nonzero().flatten()
    if bad.numel() > 0:
        i = int(bad[0])
        raise NonFiniteRewardError(
            f"reward of trajectory {i} (group {int(group_ids[i])}) is {float(rewards[i])}; "
            f"{counted(bad.numel(), 'non-finite reward')} in the batch: fix the verifier/reward parsing upstream"
        )
    if exclude is None:
        return torch.zeros_like(rewards, dtype=torch.bool)
    if exclude.shape != rewards.shape:
        raise ValueError(f"exclude must be (N,) like rewards, got {tuple(exclude.shape)}")
    return exclude.to(torch.bool)


def _group_stats(rewards: Tensor, group_ids: Tensor, exclude: Tensor | None) -> _Groups:
    """Per-group count, mean and all-equal flag over the included rows (float64)."""
    excluded = _check_inputs(rewards, group_ids, exclude)
    included = ~excluded
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    r = torch.where(included, rewards.to(torch.float64), 0.0)
    count = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, inverse, included.to(torch.float64))
    total = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, inverse, r)
    mean = total / count.clamp(min=1.0)
    hi = torch.full((num_groups,), -torch.inf, dtype=torch.float64)
    lo = torch.full((num_groups,), torch.inf, dtype=torch.float64)
    hi = hi.scatter_reduce(0, inverse, torch.where(included, r, -torch.inf), reduce="amax")
    lo = lo.scatter_reduce(0, inverse, torch.where(included, r, torch.inf), reduce="amin")
    all_equal = (hi == lo) | (count == 0)
    return _Groups(inverse, num_groups, r, included, count, mean, all_equal)


def _metrics(advantages: Tensor, excluded_rows: int, zero_var: int, below_min: int) -> dict[str, float]:
    return {
        metric_keys.ADVANTAGE_ZERO_VARIANCE_GROUPS: float(zero_var),
        metric_keys.ADVANTAGE_BELOW_MIN_GROUPS: float(below_min),
        "advantage/excluded_rows": float(excluded_rows),
        "advantage/mean_abs": float(advantages.double().abs().mean()) if advantages.numel() else 0.0,
    }


def rloo(
    rewards: Tensor, group_ids: Tensor, exclude: Tensor | None = None
) -> tuple[Tensor, dict[str, float]]:
    """RLOO: reward minus the mean reward of the other members of the group.

    Formula: A_i = R_i - mean_{j in G, j != i} R_j = m/(m-1) * (R_i - mean_G R), m = |G|
    counted over included rows. A group with m <= 1 gets A = 0 (no baseline exists); a group
    whose rewards are all equal gets exactly 0. Excluded rows get 0.

    Args:
        rewards: (N,) float, finite.
        group_ids: (N,) int64, any order.
        exclude: (N,) bool or None.
    Returns: (N,) float32 advantages and the metrics dict (module docstring).
    Raises: NonFiniteRewardError naming the first NaN/inf trajectory; ValueError on shapes.
    Source: Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization
        for Learning from Human Feedback in LLMs" (RLOO); Kool et al. 2019.
    """
    g = _group_stats(rewards, group_ids, exclude)
    m = g.count[g.inverse]
    scale = m / (m - 1).clamp(min=1.0)
    adv = scale * (g.rewards - g.mean[g.inverse])
    keep = g.included & (m > 1) & ~g.all_equal[g.inverse]
    adv = torch.where(keep, adv, 0.0).to(torch.float32)
    zero_var = int((g.all_equal & (g.count > 1)).sum())
    below = int((g.count < 2).sum())  # a group whose rows are all excluded counts too
    return adv, _metrics(adv, int((~g.included).sum()), zero_var, below)


def rloo_n(
    rewards: Tensor,
    group_ids: Tensor,
    exclude: Tensor | None,
    min_group_size: int = 4,
    filter_zero_variance_groups: bool = True,
) -> tuple[Tensor, dict[str, float]]:
    """RLOO-n: RLOO over the non-excluded rows of each group, with a zero-variance filter and
    a minimum group size (the seed run's estimator).

    Per group, with I the included rows and m = |I|:
      1. excluded rows get A = 0;
      2. if ``filter_zero_variance_groups`` and m > 1 and all R_i (i in I) are exactly equal:
         every row gets 0 (counted in ``advantage/zero_variance_groups``);
      3. else if m < ``min_group_size``: every row gets 0 (``advantage/below_min_groups``,
         m = 0 included: a group whose rows are all excluded);
      4. else A_i = m/(m-1) * (R_i - mean_{j in I} R_j) for i in I.
    With the filter off, step 4 applied to an all-equal group is exactly 0 as well (computed
    so, never fp residue); the flag then only decides which counter the group lands in.

    Args:
        rewards: (N,) float, finite (excluded rows' values are ignored but must be finite).
        group_ids: (N,) int64, any order.
        exclude: (N,) bool or None (None = nothing excluded).
        min_group_size: k >= 2; validated against n by ``AlgorithmConfig``.
        filter_zero_variance_groups: see step 2.
    Returns: (N,) float32 advantages; metrics dict. Golden: rewards [1,1,1,0,0,0,0,0] in one
        group give +0.7143 (= 8/7 * 5/8) for the ones and -0.4286 (= -8/7 * 3/8) for the zeros.
    Raises: NonFiniteRewardError; ValueError if ``min_group_size`` < 2 or shapes mismatch.
    Source: docs/algorithms.md, Advantages (MarinSkyRL ``rloo_n``); RLOO: Ahmadian et al. 2024.
    """
    if min_group_size < 2:
        raise ValueError(f"min_group_size must be >= 2, got {min_group_size}")
    g = _group_stats(rewards, group_ids, exclude)
    nonempty = g.count > 0
    zero_var = g.all_equal & (g.count > 1) if filter_zero_variance_groups else torch.zeros_like(nonempty)
    below_min = ~zero_var & (g.count < min_group_size)  # includes groups whose rows are all excluded
    trainable = nonempty & ~zero_var & ~below_min & ~g.all_equal
    m = g.count[g.inverse]
    adv = m / (m - 1).clamp(min=1.0) * (g.rewards - g.mean[g.inverse])
    adv = torch.where(g.included & trainable[g.inverse], adv, 0.0).to(torch.float32)
    return adv, _metrics(adv, int((~g.included).sum()), int(zero_var.sum()), int(below_min.sum()))


def grpo(
    rewards: Tensor,
    group_ids: Tensor,
    exclude: Tensor | None = None,
    std_eps: float = 1e-6,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO: group-standardized reward (for comparison runs only).

    Formula: A_i = (R_i - mean_G R) / (std_G R + std_eps), std with Bessel's correction
    (unbiased, as ``torch.std``), over included rows. Guard: a group with std < 1e-6 (this
    covers exact ties and fp residue) or with fewer than 2 included rows gets A = 0, so
    [0.35]*8 gives 0 and [0.35]*7 + [0.0] gives finite values bounded by (m-1)/sqrt(m).

    Args:
        rewards: (N,) float, finite. group_ids: (N,) int64, any order. exclude: (N,) bool or None.
        std_eps: added to the std in the denominator.
    Returns: (N,) float32 advantages; metrics dict.
    Raises: NonFiniteRewardError; ValueError on shapes.
    Source: Shao et al. 2024, "DeepSeekMath" (GRPO), eq. 3 outcome supervision.
    """
    g = _group_stats(rewards, group_ids, exclude)
    dev = torch.where(g.included, g.rewards - g.mean[g.inverse], 0.0)
    sq = torch.zeros(g.num_groups, dtype=torch.float64).index_add_(0, g.inverse, dev * dev)
    std = (sq / (g.count - 1).clamp(min=1.0)).sqrt()
    flat = g.all_equal | (std < 1e-6) | (g.count < 2)
    adv = dev / (std[g.inverse] + std_eps)
    adv = torch.where(g.included & ~flat[g.inverse], adv, 0.0).to(torch.float32)
    zero_var = int((flat & (g.count > 1)).sum())
    below = int((g.count < 2).sum())  # a group whose rows are all excluded counts too
    return adv, _metrics(adv, int((~g.included).sum()), zero_var, below)
