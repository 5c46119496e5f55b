"""The non-finite gradient guard: a step whose gradient holds a NaN or an inf is skipped (one
``inf`` would otherwise turn every parameter NaN through AdamW), counted, and K skipped optimizer
steps in a row stop the run.

Stage: ``trainer/``. The policy update (``update.py``) calls :func:`step_if_finite` in place of
``optimizer.step()``; ``train_on_batch`` folds the per-step flags with :func:`skip_counts`; the
loop feeds each training step's metrics to :class:`NonFiniteStreak`.
"""

from __future__ import annotations

import logging
import math

import torch

from swerl import metric_keys
from swerl.errors import RunFailed

log = logging.getLogger(__name__)

SKIPPED = metric_keys.UPDATE_SKIPPED_NONFINITE_STEPS
"""Optimizer steps of the training step skipped for a non-finite gradient (a count)."""
TRAILING = "update/trailing_nonfinite_steps"
"""Skipped optimizer steps at the end of the training step (how the streak carries over)."""


def step_if_finite(optimizer: torch.optim.Optimizer, grad_norm: torch.Tensor | float) -> float:
    """``optimizer.step()`` unless the global gradient norm is NaN or infinite.

    Args:
        optimizer: the optimizer whose parameters hold this step's gradients.
        grad_norm: the global L2 norm of the gradients (before clipping), the same on every rank
            (gradients are all-reduced before it is taken), so every rank decides alike.
    Returns: 1.0 when the step was skipped (the parameters and the optimizer state are left as
        they were), else 0.0. The caller still zeroes the gradients and steps the LR schedule.
    """
    if math.isfinite(float(grad_norm)):
        optimizer.step()
        return 0.0
    log.warning("non-finite gradient (norm %s): optimizer step skipped", float(grad_norm))
    return 1.0


def skip_counts(flags: list[float]) -> dict[str, float]:
    """Fold the skip flags of a training step's optimizer steps (in order) into its metrics.

    Returns: ``update/skipped_nonfinite_steps`` (their sum) and ``update/trailing_nonfinite_steps``
        (how many of the last ones were skipped in a row).
    """
    trailing = 0
    for flag in flags:
        trailing = trailing + 1 if flag else 0
    return {SKIPPED: float(sum(1 for f in flags if f)), TRAILING: float(trailing)}


class NonFiniteStreak:
    """Counts skipped optimizer steps in a row across training steps; stops the run at ``limit``.

    Args: limit: K >= 1, ``optimizer.max_consecutive_nonfinite_steps``.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_a_row = 0

    def observe(self, step: int, metrics: dict[str, float]) -> None:
        """Update the streak with one training step's metrics.

        Args:
            step: the global step (for the message).
            metrics: ``train_on_batch``'s metrics (``policy/optimizer_steps`` and the two keys above).
        Raises: RunFailed (exit 1) once ``limit`` optimizer steps in a row were skipped.
        """
        skipped, total = int(metrics.get(SKIPPED, 0)), int(metrics.get(metric_keys.POLICY_OPTIMIZER_STEPS, 1))
        if skipped == total:
            self.in_a_row += skipped
        else:
            self.in_a_row = int(metrics.get(TRAILING, 0))
        if self.in_a_row >= self.limit:
            raise RunFailed(
                f"step {step}: {self.in_a_row} optimizer steps in a row had a NaN/inf gradient and were skipped "
                f"(optimizer.max_consecutive_nonfinite_steps={self.limit}): lower optimizer.lr, check the rewards "
                "and the model's dtype, then resume from the last checkpoint"
            )
