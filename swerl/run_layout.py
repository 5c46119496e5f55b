"""The layout of a run folder: every name a ``swerl train`` run directory (RUN_DIR) and a
``swerl eval`` output folder hold, spelled once (docs/runs.md draws the tree).

A leaf of the import graph: it imports nothing of swerl, so the trainer, selection, the report
and eval all read their paths here::

    RUN_DIR/config.yaml, metrics.jsonl, train.log
    RUN_DIR/checkpoints/global_step_N/, checkpoints/latest_ckpt_global_step.txt
    RUN_DIR/exports/global_step_N/
    RUN_DIR/rollouts/step_N.jsonl, eval/step_N.jsonl, trajectories/step_N.jsonl
    RUN_DIR/tensorboard/, mlruns/, logs/, weight_sync/, task_health.exclude.yaml
    EVAL_OUT/trajectories.jsonl, summary.json
"""

from __future__ import annotations

import re
from pathlib import Path

CONFIG_FILE = "config.yaml"  # the resolved config of the last start that trained
METRICS_FILE = "metrics.jsonl"  # one JSON record per committed step
RUN_LOG = "train.log"  # every log line of the run
CKPT_DIR = "checkpoints"  # full training state, one global_step_N folder per checkpoint
LATEST_FILE = "latest_ckpt_global_step.txt"  # in CKPT_DIR: the step of the newest complete checkpoint
EXPORT_DIR = "exports"  # HF exports, one global_step_N folder each
ROLLOUTS_DIR = "rollouts"  # step_N.jsonl: sample records of the training episodes
EVAL_DIR = "eval"  # step_N.jsonl: sample records of the held-out eval episodes
TRAJECTORIES_DIR = "trajectories"  # step_N.jsonl: whole trajectories (logging.dump_trajectories)
TENSORBOARD_DIR = "tensorboard"
MLFLOW_DIR = "mlruns"  # MLflow's file store when logging.mlflow names no tracking URI
ENGINE_LOGS_DIR = "logs"  # rank{r}/: the vLLM servers' logs
WEIGHT_SYNC_DIR = "weight_sync"  # weights handed to the generator on disk (generator.weight_sync_dir unset)
HEALTH_PATCH_FILE = "task_health.exclude.yaml"  # written by swerl tasks health, read by data.exclude
EVAL_TRAJECTORIES_FILE = "trajectories.jsonl"  # a swerl eval output folder: one record per episode
EVAL_SUMMARY_FILE = "summary.json"  # a swerl eval output folder: the summary
TMP_PREFIX = ".tmp-"  # a folder being written; renamed into place when whole
STEP_DIR_RE = re.compile(r"^global_step_(\d+)$")  # group 1: the step
STEP_FILE_RE = re.compile(r"^step_(\d+)\.jsonl$")  # group 1: the step


def step_dir_name(step: int) -> str:
    """``global_step_N``: the folder of step N under ``checkpoints/`` and ``exports/``."""
    return f"global_step_{step}"


def step_file_name(step: int) -> str:
    """``step_N.jsonl``: the file of step N under ``rollouts/``, ``eval/`` and ``trajectories/``."""
    return f"step_{step}.jsonl"


def export_dir(run_dir: Path, step: int) -> Path:
    """``RUN_DIR/exports/global_step_N``."""
    return run_dir / EXPORT_DIR / step_dir_name(step)
