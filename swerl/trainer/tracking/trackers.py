"""Experiment trackers next to ``metrics.jsonl`` and TensorBoard: Weights & Biases
(``logging.wandb``) and MLflow (``logging.mlflow``), both local by default (a W&B offline run,
an MLflow file store under the run directory) so a run never needs a network.

Stage: ``trainer/`` (rank 0). A tracker gets the resolved config and the run plan when it opens,
every step's metrics record, and, after training, the checkpoint ``swerl select-checkpoint``
would pick (:func:`log_selection`, called by the CLI, which reopens the tracker run by the id
kept in ``RUN_DIR/trackers.json``).

W&B offline mode writes ``RUN_DIR/wandb/offline-run-*/run-<id>.wandb``; ``wandb sync`` uploads it.
MLflow writes the file store ``RUN_DIR/mlruns`` (``mlflow ui --backend-store-uri RUN_DIR/mlruns``),
or logs to ``logging.mlflow.tracking_uri``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import time
import types
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from swerl.errors import EnvironmentProblem
from swerl.fileio import atomic_write_json
from swerl.run_layout import MLFLOW_DIR
from swerl.trainer.sections import MlflowConfig, WandbConfig

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from swerl.trainer.config import LoggingConfig

log = logging.getLogger(__name__)

IDS_FILE = "trackers.json"
"""``RUN_DIR/trackers.json``: the tracker run ids of this run directory (a resume continues them)."""


MISSING = {"wandb": "logging.wandb is set but wandb is not installed: pip install wandb",
           "mlflow": "logging.mlflow is set but mlflow is not installed: pip install 'swerl[mlflow]'"}
"""The one wording of a tracker whose package is missing, by package (raised at start or by the dry-run)."""


def check_tracker_packages(wandb: bool, mlflow: bool) -> None:
    """The packages of the trackers that are set are installed (found without importing them).

    Raises: EnvironmentProblem (exit 3) naming the first missing one and its install command.
    """
    for name, wanted in (("wandb", wandb), ("mlflow", mlflow)):
        if wanted and importlib.util.find_spec(name) is None:
            raise EnvironmentProblem(MISSING[name])


def _import_wandb() -> types.ModuleType:
    try:
        import wandb
    except ImportError as err:
        raise EnvironmentProblem(MISSING["wandb"]) from err
    return wandb


def _read_ids(run_dir: Path) -> dict[str, str]:
    path = run_dir / IDS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_ids(run_dir: Path, ids: dict[str, str]) -> None:
    atomic_write_json(run_dir / IDS_FILE, ids, indent=1)


def _plain(plan: object) -> dict[str, Any]:
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

    def __init__(self, cfg: WandbConfig, run_dir: Path, config: dict[str, Any], plan: object) -> None:
        wandb = _import_wandb()
        ids = _read_ids(run_dir)
        self.run = wandb.init(
            project=cfg.project, entity=cfg.entity, name=cfg.name or run_dir.name, tags=cfg.tags,
            mode=cfg.mode, dir=str(run_dir), id=ids.get("wandb"), resume="allow",
            config={**config, "plan": _plain(plan)}, settings=wandb.Settings(silent=True, console="off"),
        )
        _write_ids(run_dir, {**ids, "wandb": self.run.id})
        self.mode, self.run_dir = cfg.mode, run_dir

    def where(self) -> str:
        """Where the run writes and how to upload or open it (one line)."""
        if self.mode == "online":
            return f"W&B: streaming to {self.run.url}"
        return (f"W&B (offline): writing {self.run_dir / 'wandb'}/offline-run-*-{self.run.id}; upload with "
                f"`wandb sync {self.run_dir / 'wandb'}/offline-run-*-{self.run.id}`")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record one step's metrics at W&B step ``step`` (the global step)."""
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        """Finish the run (flushes the offline file)."""
        self.run.finish()


def _mlflow_client(cfg: MlflowConfig, run_dir: Path) -> MlflowClient:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as err:
        raise EnvironmentProblem(MISSING["mlflow"]) from err
    uri = cfg.tracking_uri or (run_dir / MLFLOW_DIR).resolve().as_uri()
    if uri.startswith("file:"):  # MLflow >= 3.7 refuses its file store unless this opt-out is set
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=uri)


def mlflow_key(key: str) -> str:
    """A metric key as MLflow accepts it: ``@`` becomes ``_at_`` (``eval/pass@1`` ->
    ``eval/pass_at_1``), any other character outside ``[A-Za-z0-9_-. :/]`` becomes ``_``."""
    return re.sub(r"[^0-9A-Za-z_\-. :/]", "_", key.replace("@", "_at_"))


def flat_config(node: object, prefix: str = "") -> dict[str, Any]:
    """Nested config data as dotted keys to its leaves (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``;
    lists and empty mappings are leaves)."""
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flat_config(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


def _flat(node: object) -> dict[str, str]:
    """Nested config data as dotted-key MLflow params (values as text, cut to MLflow's 6000 chars)."""
    return {k: v[:6000] if isinstance(v, str) else json.dumps(v)[:6000] for k, v in flat_config(node).items()}


class MlflowTracker:
    """One MLflow run per run directory (reopened by id when the run directory is resumed).

    The resolved config goes in as dotted params (``algorithm.loss_reduction``) and as the artifact
    ``config.json``, the run plan as ``plan.json``; each step's metrics at MLflow step = global step.

    Raises: EnvironmentProblem when mlflow is not installed.
    """

    def __init__(self, cfg: MlflowConfig, run_dir: Path, config: dict[str, Any], plan: object) -> None:
        from mlflow.entities import Param

        self.client = _mlflow_client(cfg, run_dir)
        ids = _read_ids(run_dir)
        self.run_id = ids.get("mlflow")
        if self.run_id is None:
            found = self.client.get_experiment_by_name(cfg.experiment)
            experiment = found.experiment_id if found else self.client.create_experiment(cfg.experiment)
            self.run_id = self.client.create_run(experiment, run_name=cfg.run_name or run_dir.name, tags=cfg.tags).info.run_id
            _write_ids(run_dir, {**ids, "mlflow": self.run_id})
            params = [Param(k, v) for k, v in _flat(config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                self.client.log_batch(self.run_id, params=params[i:i + 100])
        else:  # a resume: params are immutable in MLflow, the artifacts below hold the new config
            self.client.update_run(self.run_id, status="RUNNING")
        self.client.log_dict(self.run_id, config, "config.json")
        self.client.log_dict(self.run_id, _plain(plan), "plan.json")
        self.uri, self.experiment = self.client.tracking_uri, cfg.experiment

    def where(self) -> str:
        """Where the run writes and how to open it (one line)."""
        look = (f"view with `mlflow ui --backend-store-uri {self.uri}`" if self.uri.startswith("file:")
                else f"open {self.uri}")
        return f"MLflow: run {self.run_id} of experiment {self.experiment!r} in {self.uri}; {look}"

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record one step's metrics at MLflow step ``step`` (keys through :func:`mlflow_key`)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(mlflow_key(k), float(v), now, step) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)]
        for i in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[i:i + 1000])

    def close(self) -> None:
        """Mark the run finished."""
        self.client.set_terminated(self.run_id, "FINISHED")


Tracker = WandbTracker | MlflowTracker


def open_trackers(logging_cfg: LoggingConfig, run_dir: Path, config: dict[str, Any], plan: object) -> list[Tracker]:
    """The trackers ``logging_cfg`` asks for, opened with the config and the plan (rank 0 only)."""
    trackers: list[Tracker] = []
    if logging_cfg.wandb is not None:
        trackers.append(WandbTracker(logging_cfg.wandb, run_dir, config, plan))
    if logging_cfg.mlflow is not None:
        trackers.append(MlflowTracker(logging_cfg.mlflow, run_dir, config, plan))
    for tracker in trackers:
        log.info("%s", tracker.where())
    return trackers


def log_selection(logging_cfg: LoggingConfig, run_dir: Path, selection: dict[str, Any]) -> None:
    """Add the selected checkpoint (step, EMA, metric, export path) to the run's trackers.

    Reopens each tracker run by the id in ``RUN_DIR/trackers.json``; a run directory without one
    (trackers were off) is left alone. Logged as the W&B summary keys ``selection/*``, and as
    MLflow tags ``selection/*`` plus the artifact ``selection.json``.
    """
    ids = _read_ids(run_dir)
    cfg = logging_cfg.wandb
    if cfg is not None and "wandb" in ids:
        wandb = _import_wandb()
        run = wandb.init(project=cfg.project, entity=cfg.entity, mode=cfg.mode, dir=str(run_dir), id=ids["wandb"],
                         resume="allow", settings=wandb.Settings(silent=True, console="off"))
        run.summary.update({f"selection/{k}": v for k, v in selection.items()})
        run.finish()
        wandb.teardown()  # finish() can return before the service has written the run file
    ml_cfg = logging_cfg.mlflow
    if ml_cfg is not None and "mlflow" in ids:
        client = _mlflow_client(ml_cfg, run_dir)
        for key, value in selection.items():
            client.set_tag(ids["mlflow"], f"selection/{key}", str(value))
        client.log_dict(ids["mlflow"], selection, "selection.json")
