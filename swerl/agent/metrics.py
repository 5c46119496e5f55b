"""Evaluation metrics over trajectories: unbiased pass@k, mean reward, outcome counts."""

from __future__ import annotations

from collections import Counter, defaultdict
from math import comb

from swerl.agent.trajectory import Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: ``1 - C(n-c, k) / C(n, k)``.

    Args:
        n: samples drawn (>= 1); c: samples that passed (0 <= c <= n); k: 1 <= k <= n.
    Returns:
        Probability in [0, 1] that at least one of k samples drawn without replacement passes.
    Raises:
        ValueError: arguments out of range.
    Source: Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. (1).
    """
    if not (1 <= k <= n and 0 <= c <= n):
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def is_pass(traj: Trajectory) -> bool:
    """A sample passes when the verifier gave reward 1 (``passed``)."""
    return traj.outcome == "passed" and traj.reward >= 1.0


def summarize(trajectories: list[Trajectory], ks: list[int]) -> dict:
    """Eval summary over trajectories grouped by ``group_id``.

    Returns a flat dict: ``pass@k`` (mean over tasks, each k in ``ks`` not above the smallest
    group), ``reward/mean``, ``outcomes`` (counts), ``end_reasons`` (counts), ``turns/mean``,
    ``tokens/generated_mean`` (policy tokens per episode), ``tokens/context_mean``,
    ``num_tasks``, ``num_trajectories``, ``num_masked``. Empty input gives zeros.
    """
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in trajectories:
        groups[traj.group_id].append(traj)
    n_min = min((len(g) for g in groups.values()), default=0)
    count = max(len(trajectories), 1)
    summary: dict = {
        "num_tasks": len(groups),
        "num_trajectories": len(trajectories),
        "num_masked": sum(t.failure_class == "mask" for t in trajectories),
    }
    for k in sorted(set(ks)):
        if 1 <= k <= n_min:
            per_task = [pass_at_k(len(g), sum(map(is_pass, g)), k) for g in groups.values()]
            summary[f"pass@{k}"] = sum(per_task) / len(per_task)
    summary["reward/mean"] = sum(t.reward for t in trajectories) / count
    summary["turns/mean"] = sum(t.num_turns for t in trajectories) / count
    summary["tokens/generated_mean"] = sum(t.num_policy_tokens for t in trajectories) / count
    summary["tokens/context_mean"] = sum(t.context_tokens for t in trajectories) / count
    summary["outcomes"] = dict(Counter(t.outcome for t in trajectories).most_common())
    summary["end_reasons"] = dict(Counter(t.end_reason for t in trajectories).most_common())
    return summary
