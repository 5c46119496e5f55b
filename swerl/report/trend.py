"""The noise of a per-step mean reward and of its trailing EMA: pure functions of numbers.

A step's mean reward over n episodes with rewards in [0, 1] has variance at most p (1 - p) / n
(Bernoulli variance; equal for binary rewards). Under "nothing changed" every step shares one
p, estimated by the pooled mean, so a step's band does not collapse to zero on a step that
happened to score 0. The EMA is a linear filter of independent steps,
``ema_t = a x_t + (1 - a) ema_{t-1}`` with ``a = 2 / (span + 1)``, so its variance follows
``v_t = a^2 s_t + (1 - a)^2 v_{t-1}`` (``s_t`` the step's variance; ``v_1 = s_1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from swerl.selection import ema

Z95 = 1.959963984540054
"""Two-sided 95% normal quantile."""


@dataclass(frozen=True)
class Band:
    """Per step: the EMA and its 95% half-width; per step the raw values' half-width too.

    Attributes: ema, ema_half, step_half: lists of equal length K (reward units).
        pooled: the pooled mean reward the variances use.
    """

    ema: list[float]
    ema_half: list[float]
    step_half: list[float]
    pooled: float


def ema_band(values: list[float], counts: list[float], span: int) -> Band:
    """The EMA of ``values`` with 95% bands from the per-step sample counts.

    Args:
        values: (K,) per-step mean rewards in [0, 1]. counts: (K,) episodes behind each mean
            (>= 1; a missing count is taken as 1, the widest band). span: EMA span >= 1.
    Returns: Band. Raises: ValueError for lists of different lengths or an empty list.
    """
    if len(values) != len(counts) or not values:
        raise ValueError(f"ema_band needs equal, non-empty lists, got {len(values)} and {len(counts)}")
    pooled = min(1.0, max(0.0, sum(values) / len(values)))
    step_var = [pooled * (1.0 - pooled) / max(1.0, c) for c in counts]
    alpha = 2.0 / (span + 1)
    ema_var: list[float] = []
    for s in step_var:
        ema_var.append(s if not ema_var else alpha * alpha * s + (1 - alpha) ** 2 * ema_var[-1])
    return Band(ema(values, span), [Z95 * math.sqrt(v) for v in ema_var], [Z95 * math.sqrt(v) for v in step_var],
                pooled)


@dataclass(frozen=True)
class Change:
    """The trailing EMA at the last step minus the first step's value, with its 95% half-width.

    Attributes: first, last_ema, diff, half (reward units); steps, counts: what it rests on."""

    first: float
    last_ema: float
    diff: float
    half: float
    steps: int
    counts: list[float]

    def resolved(self) -> bool:
        """Whether the band excludes 0 (the change is larger than the sampling noise)."""
        return abs(self.diff) > self.half


def ema_change(values: list[float], counts: list[float], span: int) -> Change:
    """``ema_K - x_1`` with the variance of that linear combination of independent steps:
    ``ema_K = sum_i w_i x_i`` with ``w_1 = (1-a)^(K-1)``, ``w_i = a (1-a)^(K-i)`` (i >= 2), so
    ``Var = (w_1 - 1)^2 s_1 + sum_{i>=2} w_i^2 s_i`` (``s_i`` as in :func:`ema_band`).

    Raises: ValueError as :func:`ema_band`.
    """
    band = ema_band(values, counts, span)
    k, alpha = len(values), 2.0 / (span + 1)
    weights = [(1 - alpha) ** (k - 1)] + [alpha * (1 - alpha) ** (k - i) for i in range(2, k + 1)]
    weights[0] -= 1.0
    step_var = [(h / Z95) ** 2 for h in band.step_half]
    half = Z95 * math.sqrt(sum(w * w * s for w, s in zip(weights, step_var)))
    return Change(values[0], band.ema[-1], band.ema[-1] - values[0], half, k, list(counts))
