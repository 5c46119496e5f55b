"""The sample record: one episode as the experiment tools read it (``swerl compare``, the task
health ledger), without tokens or transcript.

Stage: ``agent/`` (built from a :class:`Trajectory`). Written one JSON line per episode to
``RUN_DIR/eval/step_N.jsonl`` (held-out evaluation during training), ``RUN_DIR/rollouts/step_N.jsonl``
(training rollouts) and, inside each line of ``trajectories.jsonl``, by ``swerl eval``.

Fields: ``task``, ``group_id``, ``sample_index``, ``seed`` (the episode's sampling seed, None
= the backend's RNG), ``passed`` (:func:`swerl.agent.metrics.is_pass`: the verifier gave reward
1), ``reward``, ``outcome``, ``failure_class`` (``none``/``zero``/``mask``), ``end_reason`` and,
where the trajectory carries it, ``blame`` (``attempt`` or ``infrastructure``: who a failure is
charged to).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swerl.agent.metrics import is_pass
from swerl.agent.trajectory import Trajectory
from swerl.errors import ConfigError
from swerl.fileio import atomic_write_text

OPTIONAL_FIELDS = {"blame"}
"""Trajectory fields copied into the record when the trajectory model has them."""


def sample_record(traj: Trajectory) -> dict[str, Any]:
    """The sample record of one episode (module docstring); JSON-ready."""
    return {
        "task": traj.task_name,
        "group_id": traj.group_id,
        "sample_index": traj.sample_index,
        "seed": traj.seed,
        "passed": is_pass(traj),
        "reward": traj.reward,
        "outcome": traj.outcome,
        "failure_class": str(traj.failure_class),
        "end_reason": traj.end_reason,
        **traj.model_dump(include=OPTIONAL_FIELDS, mode="json"),
    }


def write_sample_records(path: Path, trajectories: list[Trajectory], **fields: object) -> Path:
    """Write one sample record per trajectory to ``path`` (JSON lines, temp file + rename: a
    redone step replaces its file whole), each line with ``fields`` first (e.g. ``global_step``)."""
    lines = "".join(json.dumps({**fields, **sample_record(t)}) + "\n" for t in trajectories)
    return atomic_write_text(path, lines)


def read_sample_records(path: Path) -> list[dict[str, Any]]:
    """The records of a file written by :func:`write_sample_records` (or a ``trajectories.jsonl``).

    Raises: ConfigError naming the file and line of a line that is not a JSON object.
    """
    out = []
    for lineno, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{lineno}: not a JSON line ({err.msg}); remove the line or rerun") from err
        if not isinstance(record, dict) or "task" not in record:
            raise ConfigError(f"{path}:{lineno}: not a sample record (no \"task\"); pass a swerl run or eval folder")
        out.append(record)
    return out
