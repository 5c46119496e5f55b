"""No silent training on nothing: stop a run whose rollouts are mostly masked (infrastructure
failures: the Docker engine went away, images cannot be built) for several steps in a row.

Masked rows carry no learning signal (they leave the baseline and the loss), so a step made
mostly of them trains on nearly nothing; several such steps in a row mean the environment is
broken, not the policy. The guard stops the run before such a step is trained or committed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from swerl.agent.trajectory import Trajectory
from swerl.errors import RunFailed


def masked_fraction(trajs: list[Trajectory]) -> float:
    """Fraction of trajectories whose failure class is ``mask``; 0.0 for an empty batch."""
    return sum(t.failure_class == "mask" for t in trajs) / len(trajs) if trajs else 0.0


def dominant_outcome(trajs: list[Trajectory]) -> tuple[str, int]:
    """The most frequent outcome among masked trajectories (first seen wins ties) and its count."""
    counts = Counter(t.outcome for t in trajs if t.failure_class == "mask")
    return counts.most_common(1)[0] if counts else ("none", 0)


@dataclass
class MaskedGuard:
    """Counts consecutive steps whose masked fraction exceeds ``max_fraction``.

    Attributes:
        max_fraction: limit on the masked fraction of one step, in [0, 1].
        max_steps: consecutive steps over the limit that stop the run (>= 1).
        streak: steps over the limit so far, ending at the last observed step (kept in the
            checkpoint so a resume continues the count).
    """

    max_fraction: float
    max_steps: int
    streak: int = 0

    def observe(self, step: int, trajs: list[Trajectory]) -> None:
        """Update the streak with step ``step``'s rollouts.

        Raises:
            RunFailed: the streak reached ``max_steps``; the message names the dominant
                masked outcome and the fix.
        """
        fraction = masked_fraction(trajs)
        self.streak = self.streak + 1 if fraction > self.max_fraction else 0
        if self.streak < self.max_steps:
            return
        outcome, count = dominant_outcome(trajs)
        masked = sum(t.failure_class == "mask" for t in trajs)
        raise RunFailed(
            f"step {step}: {masked}/{len(trajs)} rollouts masked (> loop.max_masked_fraction="
            f"{self.max_fraction:g}) for {self.streak} consecutive steps, mostly {outcome} ({count}); "
            f"stopped before training on it: fix the sandbox infrastructure (Docker engine, images), then --resume latest"
        )
