"""The statistics of ``swerl compare``: pure functions of numbers (numpy, scipy), no files.

- :func:`paired_bootstrap_ci`: percentile bootstrap CI of the mean of per-task paired differences,
  resampling tasks with replacement (Efron & Tibshirani 1993, ch. 13), fixed seed.
- :func:`unpaired_bootstrap_ci`: the same for a difference of two means over two task sets, each
  resampled on its own.
- :func:`mcnemar_exact`: McNemar's exact test on paired binary outcomes: the discordant pairs
  b (A solved, B not) and c (B solved, A not) are Binomial(b + c, 1/2) under H0
  (``scipy.stats.binomtest``, two-sided; McNemar 1947, the exact form of Fay 2010).
- :func:`fisher_exact`: Fisher's exact test on the 2 x 2 table of solved counts (the unpaired
  counterpart, ``scipy.stats.fisher_exact``).
- :func:`t_interval`: Student-t CI of a mean across seed replicas.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0
DEFAULT_LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval at ``level``."""

    estimate: float
    low: float
    high: float
    level: float

    def excludes_zero(self) -> bool:
        """Whether 0 lies outside [low, high] (the difference is resolved at this level)."""
        return self.low > 0.0 or self.high < 0.0


def _percentiles(means: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


def paired_bootstrap_ci(diffs: np.ndarray, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                        level: float = DEFAULT_LEVEL) -> Interval:
    """Percentile bootstrap CI of ``mean(diffs)``, tasks resampled with replacement.

    Args:
        diffs: (T,) float, per-task differences (B - A) of a metric, T >= 1.
        resamples: bootstrap resamples B. seed: seed of numpy's PCG64 (the CI is reproducible).
        level: two-sided confidence level in (0, 1).
    Returns: Interval(mean, low, high); [d, d] when every difference equals d.
    Raises: ValueError for an empty ``diffs``.
    """
    diffs = np.asarray(diffs, dtype=np.float64)
    if diffs.size == 0:
        raise ValueError("paired_bootstrap_ci needs at least one task")
    rng = np.random.default_rng(seed)
    index = rng.integers(0, diffs.size, size=(resamples, diffs.size))
    low, high = _percentiles(diffs[index].mean(axis=1), level)
    return Interval(float(diffs.mean()), low, high, level)


def unpaired_bootstrap_ci(a: np.ndarray, b: np.ndarray, resamples: int = DEFAULT_RESAMPLES,
                          seed: int = DEFAULT_SEED, level: float = DEFAULT_LEVEL) -> Interval:
    """Percentile bootstrap CI of ``mean(b) - mean(a)``, each set's tasks resampled on their own.

    Args: a: (Ta,) and b: (Tb,) per-task values of two arms on task sets that need not match.
    Raises: ValueError when either set is empty.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("unpaired_bootstrap_ci needs at least one task per arm")
    rng = np.random.default_rng(seed)
    mean_a = a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    mean_b = b[rng.integers(0, b.size, size=(resamples, b.size))].mean(axis=1)
    low, high = _percentiles(mean_b - mean_a, level)
    return Interval(float(b.mean() - a.mean()), low, high, level)


@dataclass(frozen=True)
class Mcnemar:
    """McNemar's exact test: ``only_a`` = tasks A solved and B did not (b), ``only_b`` = the
    reverse (c), ``p_value`` two-sided (1.0 when no pair is discordant)."""

    only_a: int
    only_b: int
    p_value: float


def mcnemar_exact(solved_a: np.ndarray, solved_b: np.ndarray) -> Mcnemar:
    """McNemar's exact test on per-task binary success of two arms on the same tasks.

    Args: solved_a, solved_b: (T,) bool, aligned task by task.
    Returns: Mcnemar(b, c, p) with p = two-sided ``binomtest(c, b + c, 0.5)``.
    Raises: ValueError when the arrays differ in length.
    """
    solved_a, solved_b = np.asarray(solved_a, dtype=bool), np.asarray(solved_b, dtype=bool)
    if solved_a.shape != solved_b.shape:
        raise ValueError(f"mcnemar_exact needs aligned tasks, got {solved_a.shape} and {solved_b.shape}")
    only_a = int(np.sum(solved_a & ~solved_b))
    only_b = int(np.sum(solved_b & ~solved_a))
    if only_a + only_b == 0:
        return Mcnemar(0, 0, 1.0)
    return Mcnemar(only_a, only_b, float(stats.binomtest(only_b, only_a + only_b, 0.5).pvalue))


def fisher_exact(solved_a: np.ndarray, solved_b: np.ndarray) -> float:
    """Two-sided p of Fisher's exact test on [[solved_a, unsolved_a], [solved_b, unsolved_b]]
    (two independent task sets: what an unpaired comparison can test)."""
    solved_a, solved_b = np.asarray(solved_a, dtype=bool), np.asarray(solved_b, dtype=bool)
    table = [[int(solved_a.sum()), int((~solved_a).sum())], [int(solved_b.sum()), int((~solved_b).sum())]]
    return float(stats.fisher_exact(table).pvalue)


def t_interval(values: list[float], level: float = DEFAULT_LEVEL,
               bounds: tuple[float, float] = (-np.inf, np.inf)) -> Interval:
    """Mean and Student-t CI over seed replicas (n - 1 degrees of freedom), clipped to ``bounds``
    (the range the metric can take, e.g. (0, 1) for a pass rate).

    Returns: Interval(mean, low, high); [mean, mean] for one replica (no spread to measure:
        the caller shows n) or when the replicas agree (to 1e-12).
    Raises: ValueError for no values.
    """
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("t_interval needs at least one value")
    mean = float(data.mean())
    if data.size == 1 or float(np.ptp(data)) <= 1e-12:
        return Interval(mean, mean, mean, level)
    half = float(stats.t.ppf(0.5 + level / 2.0, data.size - 1) * stats.sem(data))
    return Interval(mean, max(mean - half, bounds[0]), min(mean + half, bounds[1]), level)
