"""Evaluation metrics over trajectories: unbiased pass@k (masked samples left out), mean reward,
outcome counts."""

from __future__ import annotations

from collections import Counter, defaultdict
from math import comb

from swerl import metric_keys
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

    Masked trajectories (``failure_class == "mask"``: the infrastructure failed, the model was
    not judged) leave the pass@k denominators: a task's n counts its unmasked samples only, and
    pass@k averages over the tasks with n >= k. They are reported separately.

    Returns a flat dict: ``pass@k`` (mean over those tasks, each k in ``ks`` that some task
    reaches), ``tasks_scored`` (``pass@k`` -> tasks in its mean), ``reward/mean``, ``outcomes``
    (counts), ``end_reasons`` (counts), ``turns/mean``, ``tokens/generated_mean`` (policy tokens
    per episode), ``tokens/context_mean``, ``num_tasks``, ``num_trajectories``, ``num_masked``,
    ``num_tasks_all_masked``, ``num_masked_by_control`` and ``num_zeroed_by_control`` (episodes
    without a trustworthy reward whose control run failed too / read a reward),
    ``num_tamper_suspects`` and ``tamper_suspect_rate`` (trajectories with tamper reasons, their
    fraction). Empty input gives zeros.
    """
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in trajectories:
        groups[traj.group_id].append(traj)
    judged = {g: [t for t in trajs if t.failure_class != "mask"] for g, trajs in groups.items()}
    count = max(len(trajectories), 1)
    summary: dict = {
        "num_tasks": len(groups),
        "num_trajectories": len(trajectories),
        "num_masked": sum(t.failure_class == "mask" for t in trajectories),
        "num_masked_by_control": sum(t.blame == "infrastructure" for t in trajectories),
        "num_zeroed_by_control": sum(t.blame == "attempt" for t in trajectories),
        "num_tasks_all_masked": sum(not g for g in judged.values()),
    }
    scored: dict[str, int] = {}
    for k in sorted(set(ks)):
        per_task = [pass_at_k(len(g), sum(map(is_pass, g)), k) for g in judged.values() if len(g) >= k]
        if k >= 1 and per_task:
            summary[f"pass@{k}"] = sum(per_task) / len(per_task)
            scored[f"pass@{k}"] = len(per_task)
    summary["tasks_scored"] = scored
    summary[metric_keys.REWARD_MEAN] = sum(t.reward for t in trajectories) / count
    summary[metric_keys.TURNS_MEAN] = sum(t.num_turns for t in trajectories) / count
    summary[metric_keys.TOKENS_GENERATED_MEAN] = sum(t.num_policy_tokens for t in trajectories) / count
    summary[metric_keys.TOKENS_CONTEXT_MEAN] = sum(t.context_tokens for t in trajectories) / count
    summary["num_tamper_suspects"] = sum(bool(t.tamper) for t in trajectories)
    summary["tamper_suspect_rate"] = summary["num_tamper_suspects"] / count
    summary["outcomes"] = dict(Counter(t.outcome for t in trajectories).most_common())
    summary["end_reasons"] = dict(Counter(t.end_reason for t in trajectories).most_common())
    return summary
