"""``algorithm.dynamic_sampling`` (DAPO) in the rollout stage: a step's groups without signal are
dropped and the step is refilled from the next prompts of the data order, round after round, until
it holds ``loop.train_batch_size`` groups with signal or ``max_extra_rounds`` extra rounds are spent.

Round 0 is the step's batch of B prompts; extra round r draws exactly the number of groups still
missing (``PromptSampler.next_prompts``), so a step never holds more than B groups and nothing
collected with signal is thrown away. Round r's group ids are prefixed ``step{N}/r{r}/`` (round 0
keeps ``step{N}/``), so episode seeds are distinct per round and the same after a resume.

A step whose rounds run out trains on the groups it has; one that found no group with signal at
all trains on its round-0 groups, whose advantages are all zero (the optimizer step still runs,
as without dynamic sampling, so the LR schedule and the step count stay as planned).
See docs/algorithms.md (Dynamic sampling).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from swerl import metric_keys
from swerl.agent.trajectory import Trajectory
from swerl.rl.advantages import group_index
from swerl.rl.config import AlgorithmConfig
from swerl.rl.dynamic_sampling import groups_with_signal
from swerl.rl.loss import compute_advantages
from swerl.trainer.tracking.metrics import effective_reward, excluded_from_baseline

DrawRound = Callable[[int, int], list[Trajectory]]
"""``draw(round, count)``: the trajectories (all ranks, groups contiguous) of the next ``count``
prompts of the data order, collected as extra round ``round`` (>= 1) of the step."""


@dataclass
class Filled:
    """A step's batch after dynamic sampling.

    Attributes:
        trajectories: the groups trained on (at most B, groups contiguous, in the order drawn).
        generated: every trajectory the step collected, in every round (dropped groups included).
        metrics: ``dynamic_sampling/*`` (docs/metrics.md).
    """

    trajectories: list[Trajectory]
    generated: list[Trajectory]
    metrics: dict[str, float]


def signal_by_group(algorithm: AlgorithmConfig, trajs: list[Trajectory]) -> dict[str, bool]:
    """Group id -> whether the configured estimator gives one of its rows a non-zero advantage
    (the loop's rewards and baseline exclusions; ``rl.dynamic_sampling.groups_with_signal``)."""
    ids = [t.group_id for t in trajs]
    index = group_index(ids)
    rewards = torch.tensor([effective_reward(t) for t in trajs], dtype=torch.float32)
    exclude = torch.tensor([excluded_from_baseline(t) for t in trajs], dtype=torch.bool)
    advantages, _ = compute_advantages(algorithm, rewards, index, exclude)
    signal = groups_with_signal(advantages, index)
    return {group: bool(signal[i]) for i, group in enumerate(dict.fromkeys(ids))}


def _groups(trajs: list[Trajectory]) -> list[list[Trajectory]]:
    """Contiguous groups, in order."""
    out: list[list[Trajectory]] = []
    for t in trajs:
        if not out or out[-1][0].group_id != t.group_id:
            out.append([])
        out[-1].append(t)
    return out


def fill_batch(algorithm: AlgorithmConfig, batch_size: int, first: list[Trajectory], draw: DrawRound) -> Filled:
    """Keep round ``first``'s groups with signal and draw extra rounds until ``batch_size`` are kept.

    Args:
        algorithm: the run's algorithm (estimator, ``min_group_size``, ``dynamic_sampling``).
        batch_size: B, the groups a step trains on.
        first: round 0's trajectories (B groups, contiguous).
        draw: collects an extra round (:data:`DrawRound`); called at most ``max_extra_rounds`` times.
    Returns: :class:`Filled`.
    """
    max_rounds = algorithm.dynamic_sampling.max_extra_rounds
    kept: list[list[Trajectory]] = []
    generated: list[Trajectory] = []
    dropped = rounds = 0
    trajs = first
    while True:
        generated += trajs
        signal = signal_by_group(algorithm, trajs)
        for group in _groups(trajs):
            if signal[group[0].group_id]:
                kept.append(group)
            else:
                dropped += 1
        missing = batch_size - len(kept)
        if missing <= 0 or rounds >= max_rounds:
            break
        rounds += 1
        trajs = draw(rounds, missing)
    trained = [t for group in kept for t in group] or list(first)
    metrics = {
        metric_keys.DYNAMIC_SAMPLING_GROUPS_KEPT: float(len(kept)),
        metric_keys.DYNAMIC_SAMPLING_GROUPS_DROPPED: float(dropped),
        metric_keys.DYNAMIC_SAMPLING_ROUNDS: float(rounds),
        "dynamic_sampling/batch_filled": float(len(kept) >= batch_size),
        "dynamic_sampling/prompts_drawn": float(len(kept) + dropped),
        "dynamic_sampling/trained_avg_raw_reward":
            sum(effective_reward(t) for t in trained) / len(trained) if trained else 0.0,
    }
    return Filled(trained, generated, metrics)
