"""``swerl eval`` as a library call: k episodes per task in fresh sandboxes, pass@k and the
rest of the summary, and the files that record every trajectory."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swerl.agent.config import AgentConfig
from swerl.agent.metrics import summarize
from swerl.agent.policy import BackendPolicy, Policy
from swerl.agent.rollout import RolloutEvent, collect_rollouts
from swerl.agent.trajectory import Trajectory
from swerl.errors import InferenceError
from swerl.inference.config import InferenceConfig

log = logging.getLogger(__name__)


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


class EvalConfig(BaseModel):
    """Everything ``swerl eval`` needs, validated once at the CLI edge."""

    model_config = ConfigDict(extra="forbid")

    tasks: Path = Field(description="Folder of task folders, one task folder, or a .parquet/.jsonl dataset.")
    samples: int = Field(1, ge=1, description="k episodes per task (pass@1 and pass@k are reported).")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N tasks.")
    concurrency: int = Field(8, ge=1, description="Most episodes (sandboxes) alive at once.")
    out_dir: Path = Field(description="Where trajectories.jsonl and summary.json are written.")
    agent: AgentConfig = Field(default_factory=AgentConfig)
    inference: InferenceConfig = Field(default_factory=InferenceConfig)


def model_label(config: InferenceConfig) -> str:
    """How the evaluated model is reported: the default model is named as such."""
    if config.model is None and config.backend != "openai":
        from swerl.inference.models import DEFAULT_MODEL_NAME

        return f"default: {DEFAULT_MODEL_NAME}"
    if config.backend == "openai":
        return f"{config.model or 'default'} @ {config.base_url}"
    return str(config.model)


async def _run_async(tasks: list[Any], backend: Any, config: EvalConfig,
                     on_event: Callable[[RolloutEvent], None] | None) -> tuple[list[Trajectory], dict]:
    from swerl.inference.factory import make_batcher
    from swerl.sandbox import SandboxConfig

    batcher = make_batcher(backend, config.inference)
    try:
        policy = BackendPolicy(batcher, backend.tokenizer)
        sandbox_config = SandboxConfig(concurrency=config.concurrency)
        return await evaluate(tasks, policy, sandbox_config, config.agent, n_samples=config.samples,
                              concurrency=config.concurrency, on_event=on_event)
    finally:
        await batcher.close()


def run_eval(config: EvalConfig, on_event: Callable[[RolloutEvent], None] | None = None) -> tuple[list[Trajectory], dict]:
    """Load the tasks and the model, run the eval, write ``out_dir`` files; return (trajectories, summary).

    Raises:
        TaskError / ConfigError: bad task source or model path (exit 2).
        EnvironmentProblem: default model or Docker missing (exit 3).
        InferenceError: the model's tokenizer has no chat template (``--tokenizer`` for openai).
    """
    from swerl.inference.factory import build_backend
    from swerl.tasks import load_tasks

    tasks = list(load_tasks(config.tasks, limit=config.limit).tasks)
    backend = build_backend(config.inference)
    if getattr(backend, "tokenizer", None) is None:
        raise InferenceError("the backend has no tokenizer; fix: pass --tokenizer PATH (HF folder or .gguf of the served model)")
    log.info("evaluating %s on %d tasks x %d samples (%s)", model_label(config.inference), len(tasks),
             config.samples, config.agent.protocol)
    trajectories, summary = asyncio.run(_run_async(tasks, backend, config, on_event))
    summary = {
        "model": model_label(config.inference),
        "backend": config.inference.backend,
        "protocol": config.agent.protocol,
        "tasks_source": str(config.tasks),
        "samples": config.samples,
        **summary,
    }
    write_eval_outputs(config.out_dir, trajectories, summary)
    return trajectories, summary
