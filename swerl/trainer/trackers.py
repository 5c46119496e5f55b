"""Experiment trackers next to ``metrics.jsonl`` and TensorBoard: Weights & Biases
(``logging.wandb``), offline by default so a run never needs a network.

Stage: ``trainer/`` (rank 0). A tracker gets the resolved config and the run plan when it opens,
every step's metrics record, and, after training, the checkpoint ``swerl select-checkpoint``
would pick (:func:`log_selection`, called by the CLI, which reopens the tracker run by the id
kept in ``RUN_DIR/trackers.json``).

W&B offline mode writes ``RUN_DIR/wandb/offline-run-*/run-<id>.wandb``; ``wandb sync`` uploads it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from swerl.errors import EnvironmentProblem

log = logging.getLogger(__name__)

IDS_FILE = "trackers.json"
"""``RUN_DIR/trackers.json``: the tracker run ids of this run directory (a resume continues them)."""


class WandbConfig(BaseModel):
    """``logging.wandb``: log to Weights & Biases."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field("swerl", description="W&B project.")
    entity: str | None = Field(None, description="W&B entity (team or user); None = the account default.")
    name: str | None = Field(None, description="Run name; None = the run directory's name.")
    mode: Literal["offline", "online"] = Field(
        "offline", description="offline: write RUN_DIR/wandb only (upload later with `wandb sync`); online: stream."
    )
    tags: list[str] = Field(default_factory=list, description="Run tags.")


def _import_wandb() -> Any:
    try:
        import wandb
    except ImportError as err:
        raise EnvironmentProblem("logging.wandb is set but wandb is not installed: pip install wandb") from err
    return wandb


def _read_ids(run_dir: Path) -> dict[str, str]:
    path = run_dir / IDS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_ids(run_dir: Path, ids: dict[str, str]) -> None:
    tmp = run_dir / f".tmp-{IDS_FILE}"
    tmp.write_text(json.dumps(ids, indent=1) + "\n")
    tmp.replace(run_dir / IDS_FILE)


def _plain(plan: Any) -> dict[str, Any]:
    """The run plan (a pydantic model, a dataclass or a mapping) as plain data."""
    if isinstance(plan, BaseModel):
        return plan.model_dump(mode="json")
    return asdict(plan) if is_dataclass(plan) else dict(plan)


class WandbTracker:
    """One W&B run per run directory (resumed by id when the run directory is resumed).

    Args:
        cfg: the ``logging.wandb`` settings.
        run_dir: the run directory (W&B files go to ``RUN_DIR/wandb``).
        config: the resolved train config as plain data (logged as the run's config).
        plan: the run plan (logged under config key ``plan``).
    Raises: EnvironmentProblem when wandb is not installed.
    """

    def __init__(self, cfg: WandbConfig, run_dir: Path, config: dict[str, Any], plan: Any) -> None:
        wandb = _import_wandb()
        ids = _read_ids(run_dir)
        self.run = wandb.init(
            project=cfg.project, entity=cfg.entity, name=cfg.name or run_dir.name, tags=cfg.tags,
            mode=cfg.mode, dir=str(run_dir), id=ids.get("wandb"), resume="allow",
            config={**config, "plan": _plain(plan)}, settings=wandb.Settings(silent=True, console="off"),
        )
        _write_ids(run_dir, {**ids, "wandb": self.run.id})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record one step's metrics at W&B step ``step`` (the global step)."""
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        """Finish the run (flushes the offline file)."""
        self.run.finish()


def open_trackers(logging_cfg: Any, run_dir: Path, config: dict[str, Any], plan: Any) -> list[WandbTracker]:
    """The trackers ``logging_cfg`` asks for, opened with the config and the plan (rank 0 only)."""
    trackers = []
    if getattr(logging_cfg, "wandb", None) is not None:
        trackers.append(WandbTracker(logging_cfg.wandb, run_dir, config, plan))
    return trackers


def log_selection(logging_cfg: Any, run_dir: Path, selection: dict[str, Any]) -> None:
    """Add the selected checkpoint (step, EMA, metric, export path) to the run's trackers.

    Reopens each tracker run by the id in ``RUN_DIR/trackers.json``; a run directory without one
    (trackers were off) is left alone. Logged as the W&B summary keys ``selection/*``.
    """
    ids = _read_ids(run_dir)
    cfg = getattr(logging_cfg, "wandb", None)
    if cfg is None or "wandb" not in ids:
        return
    wandb = _import_wandb()
    run = wandb.init(project=cfg.project, entity=cfg.entity, mode=cfg.mode, dir=str(run_dir), id=ids["wandb"],
                     resume="allow", settings=wandb.Settings(silent=True, console="off"))
    run.summary.update({f"selection/{k}": v for k, v in selection.items()})
    run.finish()
