"""What a training step reports: rollout statistics with the names of docs/metrics.md, and
the sinks that record them (``metrics.jsonl``, TensorBoard, ``trajectories/step_N.jsonl``).

Metric keys are slash-namespaced; every record carries ``global_step``.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swerl import metric_keys
from swerl.fileio import atomic_write_text
from swerl.agent.trajectory import Trajectory
from swerl.run_layout import FLAGGED_FILE, METRICS_FILE, TENSORBOARD_DIR, TRAJECTORIES_DIR, step_file_name
from swerl.sandbox.types import Blame

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

log = logging.getLogger(__name__)


def effective_reward(traj: Trajectory) -> float:
    """The reward training uses: the verifier's for ``none``, 0 for ``mask``/``zero`` failures."""
    return float(traj.reward) if traj.failure_class == "none" else 0.0


def excluded_from_baseline(traj: Trajectory) -> bool:
    """Whether the row leaves its group's baseline: an infrastructure failure or a ``mask`` row."""
    return traj.exclude_from_baseline or traj.failure_class == "mask"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def generated_tokens(traj: Trajectory) -> int:
    """Ids the policy generated in the episode, whether or not they are trainable.

    A ``mask``-class row (context overflow, sandbox error) has an all-zero ``loss_mask`` but its
    ``num_policy_tokens`` still counts what was sampled; records that predate that field fall
    back to the loss mask.
    """
    return max(traj.num_policy_tokens, sum(traj.loss_mask))


def rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Statistics of one training batch, before any advantage filtering.

    ``reward/avg_raw_reward``: mean effective reward over ALL trajectories (failures = 0);
    ``reward/avg_pass_at_n``: fraction of groups with a reward > 0; ``reward/tamper_suspect_rate``:
    fraction of trajectories with tamper reasons (whatever ``on_tamper`` did). ``response_length/*`` are in
    generated tokens (:func:`generated_tokens`) of EVERY row, masked ones included (a context
    overflow is the longest episode, never a 0), split by rewarded / unrewarded (effective reward
    > 0 / <= 0); ``response_length/masked_mean`` and ``/masked_rows`` report the ``mask``-class
    rows separately. ``tokens/generated`` sums every row's generated tokens, ``tokens/trainable``
    the ``loss_mask`` ones. Outcome and failure-class counts; the control runs (:func:`control_metrics`).
    """
    rewards = [effective_reward(t) for t in trajs]
    gen = [float(generated_tokens(t)) for t in trajs]
    trainable = [float(sum(t.loss_mask)) for t in trajs]
    masked = [g for g, t in zip(gen, trajs) if t.failure_class == "mask"]
    groups: dict[str, bool] = {}
    for t, r in zip(trajs, rewards):
        groups[t.group_id] = groups.get(t.group_id, False) or r > 0
    out: dict[str, float] = {
        metric_keys.REWARD_AVG_RAW_REWARD: _mean(rewards),
        metric_keys.REWARD_AVG_PASS_AT_N: _mean([float(v) for v in groups.values()]),
        metric_keys.REWARD_NUM_TRAJECTORIES: float(len(trajs)),
        "reward/tamper_suspect_rate": _mean([float(bool(t.tamper)) for t in trajs]),
        metric_keys.RESPONSE_LENGTH_MEAN: _mean(gen),
        metric_keys.RESPONSE_LENGTH_MAX: max(gen, default=0.0),
        metric_keys.RESPONSE_LENGTH_CLIP_FRACTION: _mean([float(t.hit_length_limit) for t in trajs]),
        metric_keys.RESPONSE_LENGTH_REWARD_POS_MEAN: _mean([g for g, r in zip(gen, rewards) if r > 0]),
        metric_keys.RESPONSE_LENGTH_REWARD_ZERO_MEAN: _mean([g for g, r in zip(gen, rewards) if r <= 0]),
        metric_keys.RESPONSE_LENGTH_MASKED_MEAN: _mean(masked),
        "response_length/masked_rows": float(len(masked)),
        metric_keys.TURNS_MEAN: _mean([float(t.num_turns) for t in trajs]),
        "tokens/prompt": float(sum(len(t.prompt_ids) for t in trajs)),
        "tokens/generated": float(sum(gen)),
        "tokens/trainable": float(sum(trainable)),
        "tokens/observation": float(sum(len(t.response_ids) for t in trajs) - sum(gen)),
    }
    out.update(control_metrics(trajs))
    out.update(sandbox_metrics(trajs))
    for name, count in Counter(t.failure_class for t in trajs).items():
        out[f"failure_class/{name}"] = float(count)
    for name, count in Counter(t.outcome for t in trajs).items():
        out[f"outcome/{name}"] = float(count)
    return out


def control_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """What the control runs of the batch decided and cost: ``rollout/masked_by_control`` (episodes
    without a trustworthy reward whose control failed too: masked, their tasks flagged),
    ``rollout/zeroed_by_control`` (whose control read a reward: the attempt's fault, reward 0 kept),
    ``rollout/control_s`` (wall-clock seconds the controls took, summed over episodes)."""
    return {
        "rollout/masked_by_control": float(sum(t.blame == Blame.infrastructure for t in trajs)),
        "rollout/zeroed_by_control": float(sum(t.blame == Blame.attempt for t in trajs)),
        "rollout/control_s": float(sum(t.timings_s.get("control_s", 0.0) for t in trajs)),
    }


def sandbox_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """How the batch's sandboxes were ready: ``sandbox/pool_hit_rate`` (share of the episodes'
    containers taken from a warm pool, the clean room's verifier containers included, in [0, 1])
    and ``sandbox/container_wait_s`` (mean seconds an episode waited for its started container).
    Episodes whose sandbox never started carry neither; {} when no episode has a container."""
    warm = sum(t.timings_s.get("containers_warm", 0.0) for t in trajs)
    cold = sum(t.timings_s.get("containers_cold", 0.0) for t in trajs)
    waits = [t.timings_s["container_wait_s"] for t in trajs if "container_wait_s" in t.timings_s]
    if not waits:
        return {}
    return {metric_keys.SANDBOX_POOL_HIT_RATE: warm / (warm + cold) if warm + cold else 0.0,
            metric_keys.SANDBOX_CONTAINER_WAIT_S: _mean(waits)}


def make_record(step: int, metrics: dict[str, float]) -> dict[str, Any]:
    """The ``metrics.jsonl`` record of ``step``: ``global_step`` first, then the metrics by key."""
    return {"global_step": step, **{k: metrics[k] for k in sorted(metrics)}}


TB_EPISODES = 3
"""Episodes per step shown in TensorBoard: the first passed, failed and masked one (then others)."""


def _tb_config(writer: SummaryWriter, config: dict[str, Any]) -> None:
    """The resolved config as TensorBoard text (``config``, YAML) and as hparams (HPARAMS tab)."""
    import yaml
    from torch.utils.tensorboard.summary import hparams

    from swerl.trainer.tracking.trackers import flat_config

    writer.add_text("config", "```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```", 0)
    values = {k: v if isinstance(v, (bool, int, float, str)) else json.dumps(v) for k, v in flat_config(config).items()}
    for summary in hparams(values, {}):
        writer.file_writer.add_summary(summary)
    writer.flush()


def episodes_markdown(trajs: list[Trajectory], advantages: list[float], k: int = TB_EPISODES) -> str:
    """Markdown of up to ``k`` episodes: the first passed, failed and masked ones first; each
    with its reward, advantage, outcome, last reply (cut to 1500 characters) and verifier tail."""
    order = sorted(range(len(trajs)), key=lambda i: (
        [trajs[i].outcome == "passed", trajs[i].outcome == "failed", trajs[i].failure_class == "mask"].index(True)
        if trajs[i].outcome in ("passed", "failed") or trajs[i].failure_class == "mask" else 3, i))
    picked, seen = [], set()
    for i in order:  # one per kind first, then the rest in order
        kind = (trajs[i].outcome, trajs[i].failure_class)
        if kind not in seen:
            picked.append(i)
            seen.add(kind)
    picked = (picked + [i for i in order if i not in picked])[:k]
    parts = []
    for i in picked:
        t = trajs[i]
        replies = [m.get("content", "") for m in t.messages if m.get("role") == "assistant"]
        last = str(replies[-1])[:1500] if replies else "(no reply)"
        tail = "\n".join(t.verifier_output_tail.splitlines()[-5:]) or t.detail or "(none)"
        parts.append(f"**{t.task_name}** sample {t.sample_index}: reward {t.reward:g}, advantage {advantages[i]:+.4f}, "
                     f"outcome {t.outcome} ({t.failure_class}, {t.end_reason}{', cut at the limit' if t.hit_length_limit else ''})"
                     f"\n\n```\n{last}\n```\n\nverifier:\n```\n{tail}\n```")
    return "\n\n---\n\n".join(parts)


class MetricsSink:
    """Appends one JSON line per step to ``RUN_DIR/metrics.jsonl`` and, when asked, TensorBoard and
    the experiment trackers (``trainer/tracking/trackers.py``: objects with ``log(step, metrics)`` and
    ``close()``).

    A line is written with a single ``write`` + flush + fsync, so an interrupted run leaves whole
    lines only. Use from rank 0.
    """

    def __init__(self, run_dir: Path, tensorboard: bool = False, trackers: list[Any] | None = None,
                 config: dict[str, Any] | None = None) -> None:
        self.trackers = list(trackers or [])
        self.path = run_dir / METRICS_FILE
        self._fh = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR))
            log.info("TensorBoard: writing %s; view with `tensorboard --logdir %s`", run_dir / TENSORBOARD_DIR,
                     run_dir / TENSORBOARD_DIR)
            if config is not None:
                _tb_config(self._tb, config)

    def log_episodes(self, step: int, trajs: list[Trajectory], advantages: list[float]) -> None:
        """TensorBoard text ``episodes``: a few of the step's episodes (:data:`TB_EPISODES`)."""
        if self._tb is not None and trajs:
            self._tb.add_text("episodes", episodes_markdown(trajs, advantages), step)
            self._tb.flush()

    def log(self, step: int, metrics: dict[str, float]) -> dict[str, Any]:
        """Record ``metrics`` of ``step``; returns the written record."""
        return self.append(make_record(step, metrics))

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Write a record made by :func:`make_record` (one line, fsynced) and its scalars; returns it."""
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        step = record["global_step"]
        metrics = {k: v for k, v in record.items() if k != "global_step"}
        if self._tb is not None:
            for key, value in metrics.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        for tracker in self.trackers:
            tracker.log(step, metrics)
        return record

    def close(self) -> None:
        """Flush and close the sinks."""
        self._fh.close()
        if self._tb is not None:
            self._tb.close()
        for tracker in self.trackers:
            tracker.close()


def record_flagged(run_dir: Path, step: int, trajs: list[Trajectory]) -> int:
    """Append the episodes whose control failed too (``blame: infrastructure``: their task or engine
    is at fault) to ``RUN_DIR/flagged_tasks.jsonl``, one line each; returns how many."""
    flagged = [t for t in trajs if t.blame == Blame.infrastructure]
    if flagged:
        lines = "".join(json.dumps({"global_step": step, "task": t.task_name, "group_id": t.group_id,
                                    "sample_index": t.sample_index, "outcome": t.outcome, "detail": t.detail}) + "\n"
                        for t in flagged)
        with open(run_dir / FLAGGED_FILE, "a", encoding="utf-8") as fh:
            fh.write(lines)
            fh.flush()
            os.fsync(fh.fileno())
        log.warning("step %d: %d episode(s) masked by a failed control; tasks flagged in %s: %s", step, len(flagged),
                    FLAGGED_FILE, ", ".join(sorted({t.task_name for t in flagged})))
    return len(flagged)


def dump_trajectories(run_dir: Path, step: int, trajs: list[Trajectory], advantages: list[float]) -> Path:
    """Write ``RUN_DIR/trajectories/step_N.jsonl``: every trajectory with its advantage (atomic)."""
    lines = (json.dumps({"global_step": step, "advantage": adv, **traj.model_dump(mode="json")}) + "\n"
             for traj, adv in zip(trajs, advantages))
    return atomic_write_text(run_dir / TRAJECTORIES_DIR / step_file_name(step), "".join(lines))
