"""``swerl eval`` as a library call: k episodes per task in fresh sandboxes, pass@k and the
rest of the summary, and the files that record every trajectory."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swerl.agent.config import AgentConfig
from swerl.agent.metrics import summarize
from swerl.agent.policy import Policy
from swerl.agent.rollout import RolloutEvent, collect_rollouts
from swerl.agent.trajectory import Trajectory


async def evaluate(
    tasks: list[Any],
    policy: Policy,
    sandbox_config: Any,
    agent_cfg: AgentConfig,
    *,
    n_samples: int,
    concurrency: int,
    on_event: Callable[[RolloutEvent], None] | None = None,
) -> tuple[list[Trajectory], dict]:
    """Run ``n_samples`` episodes of every task and summarize them.

    Args:
        tasks: ``swerl.tasks.Task`` objects.
        policy: the model under evaluation.
        sandbox_config: a ``swerl.sandbox.SandboxConfig`` (one manager for the whole eval).
        agent_cfg: protocol, limits, sampling.
        n_samples: k samples per task (pass@1 and pass@k are reported).
        concurrency: most episodes alive at once.
        on_event: progress callback (see :class:`RolloutEvent`).
    Returns:
        (trajectories grouped by task, summary dict of :func:`swerl.agent.metrics.summarize`
        plus ``wall_s``).
    Raises:
        SandboxError / EnvironmentProblem: the Docker engine cannot be used at all.
    """
    from swerl.sandbox import SandboxManager

    started = time.monotonic()
    async with SandboxManager(sandbox_config) as manager:
        trajectories = await collect_rollouts(
            tasks, n_samples, policy, manager, agent_cfg, concurrency=concurrency, on_event=on_event
        )
    summary = summarize(trajectories, ks=[1, n_samples])
    summary["wall_s"] = time.monotonic() - started
    return trajectories, summary


def trajectory_record(traj: Trajectory) -> dict:
    """The JSON line of one trajectory in ``trajectories.jsonl``: identity, outcome, reward,
    token counts, timings, verifier output tail and the chat transcript (no token ids)."""
    return {
        "task": traj.task_name,
        "group_id": traj.group_id,
        "sample_index": traj.sample_index,
        "outcome": traj.outcome,
        "reward": traj.reward,
        "failure_class": traj.failure_class,
        "end_reason": traj.end_reason,
        "num_turns": traj.num_turns,
        "prompt_tokens": len(traj.prompt_ids),
        "response_tokens": len(traj.response_ids),
        "generated_tokens": traj.num_policy_tokens,
        "context_tokens": traj.context_tokens,
        "hit_length_limit": traj.hit_length_limit,
        "num_parse_failures": traj.num_parse_failures,
        "timings_s": traj.timings_s,
        "detail": traj.detail,
        "verifier_output_tail": traj.verifier_output_tail,
        "messages": traj.messages,
    }


def write_eval_outputs(out_dir: Path, trajectories: list[Trajectory], summary: dict) -> tuple[Path, Path]:
    """Write ``out_dir/trajectories.jsonl`` and ``out_dir/summary.json`` (temp file + rename each).

    Returns: (trajectories path, summary path).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(trajectory_record(t), ensure_ascii=False) + "\n" for t in trajectories)
    traj_path = _atomic_write(out_dir / "trajectories.jsonl", lines)
    summary_path = _atomic_write(out_dir / "summary.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return traj_path, summary_path


def _atomic_write(path: Path, text: str) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
