"""The step commit protocol: a training step's outputs (HF export when due, metrics record,
checkpoint) become visible as one unit, and a resume puts right whatever a ``kill -9`` left.

Order within step N (rank 0 writes; every rank joins the collective saves):

    1. HF export, when due: ``exports/.tmp-global_step_N`` renamed to ``exports/global_step_N``.
    2. The step's metrics record is built and stored inside the checkpoint's trainer state
       (``trainer_state.json["records"]``).
    3. Checkpoint, when due: its rename into ``checkpoints/global_step_N`` is the COMMIT POINT.
    4. The record is appended to ``metrics.jsonl`` (one write + fsync).

A step without a checkpoint is committed by the next checkpoint; until then a kill redoes it.
With ``checkpointing.async_save``, 1. and 3. only start the writes (``background.py``): their renames
come later, in this order, once written, so step 4 may run before the commit point; a kill in
between leaves ``.tmp-*`` folders and a record past the last checkpoint, both undone at the resume.
At a resume from the checkpoint of step C (:func:`reconcile_run`), everything past C is
uncommitted and is redone: stale ``.tmp-*`` folders (exports, checkpoints) are removed, ``metrics.jsonl`` loses the
records after C (and a torn last line), exports after C are removed; a committed record that
never reached ``metrics.jsonl`` (the kill came between steps 3 and 4) is appended from the
checkpoint. A run whose files are already consistent is left untouched, byte for byte.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swerl import metric_keys
from swerl.fileio import atomic_write_text
from swerl.text import counted
from swerl.run_layout import CKPT_DIR, EXPORT_DIR, METRICS_FILE, TMP_PREFIX
from swerl.run_layout import STEP_DIR_RE as _STEP_DIR
from swerl.trainer.tracking.metrics import MetricsSink, make_record

log = logging.getLogger(__name__)

RECORDS_KEY = "records"


def commit_step(
    step: int,
    metrics: dict[str, float],
    t_step: float,
    *,
    export: Callable[[], Any] | None,
    checkpoint: Callable[[list[dict]], Any] | None,
    append: Callable[[dict], Any] | None,
) -> dict[str, Any]:
    """Write step ``step``'s outputs in commit order (module docstring) and return its record.

    Args:
        metrics: the step's metrics; ``timing/export_s`` and ``timing/step_s`` are added here.
        t_step: ``time.monotonic()`` at the start of the step.
        export: writes the HF export (tmp + rename), or None when no export is due.
        checkpoint: writes the checkpoint with the given records in its trainer state (the
            commit point), or None when no checkpoint is due.
        append: appends a record to ``metrics.jsonl`` (None off rank 0).
    Returns: the record (``global_step`` + sorted metrics), as stored and appended.
    """
    t0 = time.monotonic()
    if export is not None:
        export()
    metrics[metric_keys.TIMING_EXPORT_S] = time.monotonic() - t0
    metrics[metric_keys.TIMING_STEP_S] = time.monotonic() - t_step  # up to the commit: the checkpoint write is logged
    record = make_record(step, metrics)
    if checkpoint is not None:
        t0 = time.monotonic()
        checkpoint([record])
        log.debug("step %d: checkpoint written in %.2fs", step, time.monotonic() - t0)
    if append is not None:
        append(record)
    return record


def _read_records(path: Path) -> tuple[list[tuple[int, str]], bool]:
    """(global_step, line) of every whole record in ``metrics.jsonl``; True when a line was
    unreadable (a torn write)."""
    if not path.is_file():
        return [], False
    out: list[tuple[int, str]] = []
    torn = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            out.append((int(json.loads(line)["global_step"]), line))
        except (ValueError, KeyError, TypeError):
            torn = True
    return out, torn


def truncate_metrics(run_dir: Path, last_step: int) -> int:
    """Drop records of steps after ``last_step`` and unreadable lines; untouched when none.

    Returns: lines dropped.
    """
    path = run_dir / METRICS_FILE
    rows, torn = _read_records(path)
    kept = [line for step, line in rows if step <= last_step]
    if len(kept) == len(rows) and not torn:
        return 0
    atomic_write_text(path, "".join(line + "\n" for line in kept))
    dropped = len(rows) - len(kept) + int(torn)
    log.info("metrics.jsonl: dropped %s of uncommitted steps after step %d", counted(dropped, "record"), last_step)
    return dropped


def missing_records(run_dir: Path, trainer_state: dict[str, Any]) -> list[dict]:
    """Records stored in a checkpoint's trainer state whose step ``metrics.jsonl`` lacks."""
    logged = {step for step, _ in _read_records(run_dir / METRICS_FILE)[0]}
    return [r for r in trainer_state.get(RECORDS_KEY, []) if int(r["global_step"]) not in logged]


def remove_stale_temps(run_dir: Path) -> list[Path]:
    """Remove the ``.tmp-*`` entries a killed save left in ``exports/`` and ``checkpoints/``."""
    stale = [p for folder in (EXPORT_DIR, CKPT_DIR) for p in (run_dir / folder).glob(f"{TMP_PREFIX}*")]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        log.info("removed the stale temporary %s", path)
    return stale


def remove_uncommitted_exports(run_dir: Path, last_step: int) -> list[int]:
    """Remove exports of steps after ``last_step`` (they are redone).

    Returns: the steps whose export was removed.
    """
    root = run_dir / EXPORT_DIR
    if not root.is_dir():
        return []
    removed = []
    for path in root.iterdir():
        match = _STEP_DIR.match(path.name)
        if match and int(match.group(1)) > last_step:
            shutil.rmtree(path)
            removed.append(int(match.group(1)))
    if removed:
        log.info("removed exports of uncommitted steps %s (they are redone)", sorted(removed))
    return sorted(removed)


def reconcile_run(run_dir: Path, trainer_state: dict[str, Any], *, redo_after: bool) -> list[dict]:
    """Make ``run_dir`` match the checkpoint a resume starts from (rank 0 only).

    Args:
        trainer_state: the loaded checkpoint's trainer state (``global_step``, ``records``).
        redo_after: the resume trains steps after the checkpoint: drop the records and exports
            of those steps. False (nothing to train) only restores missing committed records.
    Returns: the records re-appended to ``metrics.jsonl`` from the checkpoint (not replayed to
        TensorBoard).
    """
    last = int(trainer_state["global_step"])
    if redo_after:
        remove_stale_temps(run_dir)
        truncate_metrics(run_dir, last)
        remove_uncommitted_exports(run_dir, last)
    restored = missing_records(run_dir, trainer_state)
    if restored:
        sink = MetricsSink(run_dir)
        try:
            for record in restored:
                sink.append(record)
                log.info("metrics.jsonl: restored the committed record of step %d from its checkpoint",
                         record["global_step"])
        finally:
            sink.close()
    return restored
