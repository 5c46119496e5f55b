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
