"""``swerl eval`` as a library call: k episodes per task in fresh sandboxes, pass@k and the
rest of the summary, and the files that record every trajectory.

``trajectories.jsonl`` grows as episodes finish (one whole line each, flushed), so a stopped
eval keeps its finished episodes; on SIGTERM (or any error) ``summary.json`` is written over
them with ``"partial": true``. ``--resume`` runs only the missing episodes, with the same group
ids and seeds, so the result equals an uninterrupted eval. At the end the file is rewritten in
task order and the summary is computed from it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from swerl.agent.config import AgentConfig
from swerl.agent.metrics import summarize
from swerl.agent.policy import BackendPolicy, Policy
from swerl.agent.collect import RolloutEvent, collect_rollouts
from swerl.agent.records import sample_record
from swerl.agent.trajectory import Trajectory
from swerl.errors import ConfigError, InferenceError
from swerl.fileio import atomic_write_text
from swerl.inference.config import HFGenerator, InferenceConfig, OpenAIGenerator
from swerl.run_layout import EVAL_SUMMARY_FILE, EVAL_TRAJECTORIES_FILE

if TYPE_CHECKING:
    from swerl.inference.backends.base import ContinuousBackend, GenerationBackend
    from swerl.sandbox.types import SandboxConfig
    from swerl.tasks.task_folder import Task

log = logging.getLogger(__name__)


async def evaluate(
    tasks: list[Task],
    policy: Policy,
    sandbox_config: SandboxConfig,
    agent_cfg: AgentConfig,
    *,
    n_samples: int,
    concurrency: int,
    on_event: Callable[[RolloutEvent], None] | None = None,
    skip: Collection[tuple[str, int]] = (),
    seed: int = 0,
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
        skip: ``(group_id, sample_index)`` of episodes already done (not run, not summarized).
        seed: evaluation seed: sample i of task t samples with ``eval_episode_seed(seed, t, i)``,
            as held-out evaluation during training does (``eval.seed``), so evals pair.
    Returns:
        (trajectories grouped by task, summary dict of :func:`swerl.agent.metrics.summarize`
        plus ``wall_s``).
    Raises:
        TaskError: (exit 2) a task asks for a network allowlist and the sandbox grants network.
        SandboxError / EnvironmentProblem: the Docker engine cannot be used at all.
    """
    from swerl.sandbox import SandboxManager
    from swerl.sandbox.network import check_network

    check_network(tasks, sandbox_config)
    started = time.monotonic()
    async with SandboxManager(sandbox_config) as manager:
        trajectories = await collect_rollouts(
            tasks, n_samples, policy, manager, agent_cfg, concurrency=concurrency, on_event=on_event, skip=skip,
            task_seed=seed,
        )
    summary = summarize(trajectories, ks=[1, n_samples])
    summary["wall_s"] = time.monotonic() - started
    return trajectories, summary


def trajectory_record(traj: Trajectory) -> dict:
    """The JSON line of one trajectory in ``trajectories.jsonl``: the sample record of
    :func:`swerl.agent.records.sample_record` (identity, seed, pass/fail, reward, outcome), then
    token counts, timings, verifier output tail and the chat transcript (no token ids)."""
    return {
        **sample_record(traj),
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


def trajectory_from_record(record: dict) -> Trajectory:
    """A trajectory rebuilt from its ``trajectories.jsonl`` line: every field the summary reads;
    token ids are not stored there, so ``prompt_ids``/``response_ids`` are empty."""
    return Trajectory(
        task_name=record["task"], group_id=record["group_id"], sample_index=record["sample_index"], prompt_ids=[],
        outcome=record["outcome"], reward=record["reward"], failure_class=record["failure_class"],
        end_reason=record["end_reason"], num_turns=record["num_turns"], num_policy_tokens=record["generated_tokens"],
        context_tokens=record["context_tokens"], hit_length_limit=record["hit_length_limit"],
        num_parse_failures=record["num_parse_failures"], timings_s=record["timings_s"], detail=record["detail"],
        verifier_output_tail=record["verifier_output_tail"], messages=record["messages"], seed=record.get("seed"),
    )


def read_records(path: Path) -> list[dict]:
    """The whole lines of a ``trajectories.jsonl`` (a line cut by a kill is dropped); [] when absent."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            log.warning("%s: dropped an incomplete line (the eval was killed while writing it)", path)
    return out


class EpisodeLog:
    """Appends each finished episode's record to ``trajectories.jsonl`` (one write, flushed and
    fsynced), so a stopped eval keeps every finished episode.

    Args:
        path: the file; keep_existing: append to it (resume) instead of starting it empty.
    """

    def __init__(self, path: Path, keep_existing: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh = open(path, "a" if keep_existing else "w", encoding="utf-8")

    def append(self, traj: Trajectory) -> None:
        """Write one trajectory's line."""
        self._fh.write(json.dumps(trajectory_record(traj), ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def write_eval_outputs(out_dir: Path, trajectories: list[Trajectory], summary: dict) -> tuple[Path, Path]:
    """Write ``out_dir/trajectories.jsonl`` and ``out_dir/summary.json`` (temp file + rename each).

    Returns: (trajectories path, summary path).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(trajectory_record(t), ensure_ascii=False) + "\n" for t in trajectories)
    traj_path = atomic_write_text(out_dir / EVAL_TRAJECTORIES_FILE, lines)
    return traj_path, write_summary(out_dir, summary)


def write_summary(out_dir: Path, summary: dict) -> Path:
    """Write ``out_dir/summary.json`` (temp file + rename)."""
    return atomic_write_text(out_dir / EVAL_SUMMARY_FILE, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")


class EvalConfig(BaseModel):
    """Everything ``swerl eval`` needs, validated once at the CLI edge."""

    model_config = ConfigDict(extra="forbid")

    tasks: Path = Field(description="Folder of task folders, one task folder, or a .parquet/.jsonl dataset.")
    samples: int = Field(1, ge=1, description="k episodes per task (pass@1 and pass@k are reported).")
    seed: int = Field(0, description="Evaluation seed: sample i of task t samples with a seed made from (seed, t, i) "
                      "only, as eval.seed during training, so evals of two models pair sample by sample.")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N tasks.")
    concurrency: int = Field(8, ge=1, description="Most episodes (sandboxes) alive at once.")
    engines: list[str] = Field(default_factory=list, description="Docker engine URLs of the sandbox fleet; empty = the local engine.")
    out_dir: Path = Field(description="Where trajectories.jsonl and summary.json are written.")
    resume: bool = Field(False, description="Continue the eval already in out_dir: run only its missing episodes.")
    agent: AgentConfig = Field(default_factory=AgentConfig)
    inference: InferenceConfig = Field(default_factory=HFGenerator)


def model_label(config: InferenceConfig) -> str:
    """How the evaluated model is reported: the default model is named as such, a LoRA adapter after its base."""
    if isinstance(config, OpenAIGenerator):
        return f"{config.model or 'default'} @ {config.base_url}"
    adapter = f" + LoRA {config.lora_adapter}" if config.lora_adapter else ""
    if config.model is None:
        from swerl.inference.model_files import DEFAULT_MODEL_NAME

        return f"default: {DEFAULT_MODEL_NAME}{adapter}"
    return f"{config.model}{adapter}"


async def _run_async(tasks: list[Task], backend: GenerationBackend | ContinuousBackend, config: EvalConfig,
                     on_event: Callable[[RolloutEvent], None] | None,
                     skip: Collection[tuple[str, int]]) -> tuple[list[Trajectory], dict]:
    from swerl.inference.factory import make_batcher
    from swerl.sandbox import SandboxConfig

    main = asyncio.current_task()  # the task SIGTERM cancels (run_async)

    def forward(event: RolloutEvent) -> None:
        if on_event is not None and not (main is not None and main.cancelling()):
            on_event(event)  # once stopping, episodes that end were cut short: they are not results

    batcher = make_batcher(backend, config.inference)
    try:
        policy = BackendPolicy(batcher, backend.tokenizer)
        sandbox_config = SandboxConfig(concurrency=config.concurrency, engines=[{"url": url} for url in config.engines])
        return await evaluate(tasks, policy, sandbox_config, config.agent, n_samples=config.samples,
                              concurrency=config.concurrency, on_event=forward, skip=skip, seed=config.seed)
    finally:
        await batcher.close()


def _identity(config: EvalConfig) -> dict:
    """What a resumed eval must share with the one in ``out_dir``."""
    return {"model": model_label(config.inference), "backend": config.inference.backend,
            "protocol": config.agent.protocol, "tasks_source": str(config.tasks), "samples": config.samples,
            "seed": config.seed}


def _episodes_done(config: EvalConfig, order: dict[str, int]) -> list[dict]:
    """The finished episodes a resume keeps, after checking they belong to this eval.

    Raises: ConfigError (exit 2) when out_dir holds a different eval.
    """
    previous = config.out_dir / EVAL_SUMMARY_FILE
    if previous.is_file():
        before = json.loads(previous.read_text(encoding="utf-8"))
        for key, value in _identity(config).items():
            if before.get(key) != value:
                raise ConfigError(f"--resume: {previous} has {key}={before.get(key)!r}, this eval {value!r}: "
                                  "pass the same flags, or another --out")
    done = read_records(config.out_dir / EVAL_TRAJECTORIES_FILE)
    strays = [r["group_id"] for r in done if r["group_id"] not in order or r["sample_index"] >= config.samples]
    if strays:
        raise ConfigError(f"--resume: {config.out_dir} holds episodes of other tasks ({strays[0]}): pass another --out")
    return done


def _summarize_records(config: EvalConfig, records: list[dict], wall_s: float, expected: int) -> dict:
    summary = summarize([trajectory_from_record(r) for r in records], ks=[1, config.samples])
    return {**_identity(config), **summary, "wall_s": wall_s, "partial": len(records) < expected,
            "episodes_expected": expected, "episodes_done": len(records)}


def run_eval(config: EvalConfig, on_event: Callable[[RolloutEvent], None] | None = None) -> tuple[list[Trajectory], dict]:
    """Load the tasks and the model, run the (missing) episodes, write ``out_dir`` files; return
    (trajectories, summary). Trajectories come back rebuilt from ``trajectories.jsonl``
    (:func:`trajectory_from_record`), finished ones of a resumed eval included.

    On SIGTERM/SIGHUP (``Terminated``, exit 143), Ctrl-C or an error, the finished episodes stay in
    ``trajectories.jsonl`` and ``summary.json`` summarizes them with ``"partial": true``.

    Raises:
        TaskError / ConfigError: bad task source or model path, or a ``--resume`` of another eval (exit 2).
        EnvironmentProblem: default model or Docker missing (exit 3).
        InferenceError: the model's tokenizer has no chat template (``--tokenizer`` for openai).
    """
    from swerl.agent.collect import group_id_for
    from swerl.inference.factory import build_backend
    from swerl.sandbox.signals import run_async
    from swerl.tasks import load_tasks

    tasks = list(load_tasks(config.tasks, limit=config.limit).tasks)
    order = {group_id_for(i, t.name): i for i, t in enumerate(tasks)}
    expected = len(tasks) * config.samples
    done = _episodes_done(config, order) if config.resume else []
    previous_wall_s = 0.0
    if done and (config.out_dir / EVAL_SUMMARY_FILE).is_file():
        previous_wall_s = float(json.loads((config.out_dir / EVAL_SUMMARY_FILE).read_text()).get("wall_s", 0.0))
    backend = build_backend(config.inference)
    if getattr(backend, "tokenizer", None) is None:
        raise InferenceError("the backend has no tokenizer; fix: pass --tokenizer PATH (HF folder or .gguf of the served model)")
    log.info("evaluating %s on %d tasks x %d samples (%s), %d episodes already done", model_label(config.inference),
             len(tasks), config.samples, config.agent.protocol, len(done))

    episodes = EpisodeLog(config.out_dir / EVAL_TRAJECTORIES_FILE, keep_existing=bool(done))

    def record(event: RolloutEvent) -> None:
        if event.kind == "finished" and event.trajectory is not None:
            episodes.append(event.trajectory)
        if on_event is not None:
            on_event(event)

    started = time.monotonic()
    try:
        run_async(_run_async(tasks, backend, config, record, {(r["group_id"], r["sample_index"]) for r in done}))
    finally:
        episodes.close()
        records = sorted(read_records(episodes.path), key=lambda r: (order[r["group_id"]], r["sample_index"]))
        summary = _summarize_records(config, records, previous_wall_s + time.monotonic() - started, expected)
        if not summary["partial"]:  # complete: the file in task order, like an uninterrupted eval
            atomic_write_text(episodes.path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        write_summary(config.out_dir, summary)
    return [trajectory_from_record(r) for r in records], summary
