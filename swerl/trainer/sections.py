"""The config sections that one room reads on its own: ``eval`` (held-out evaluation during
training, read by ``rollouts/evaluation.py``) and ``logging.wandb`` / ``logging.mlflow`` (the
experiment trackers, read by ``tracking/trackers.py``).

Stage: ``trainer/``, ground floor: ``config.py`` builds ``TrainConfig`` from these models, so they
import no room (a room reads them; the config never imports the room).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EvalDuringTrainingConfig(BaseModel):
    """``eval``: held-out evaluation during training (None = off)."""

    model_config = ConfigDict(extra="forbid")

    tasks: str = Field(..., description="Held-out task source: a folder of task folders, or a .parquet/.jsonl of rows.")
    limit: int | None = Field(None, ge=1, description="Use only the first N tasks of the source (after `names`).")
    names: list[str] | None = Field(None, min_length=1, description="Only tasks matching these shell patterns.")
    interval: int = Field(0, ge=0, description="Evaluate every N training steps (0 = only after the last step).")
    samples: int = Field(1, ge=1, description="Episodes per task: eval/pass@1 and eval/pass@<samples>.")
    before_train: bool = Field(False, description="Also evaluate the initial policy (a record at global_step 0).")
    seed: int = Field(0, description="Evaluation seed: sample i of task t samples with a seed made from (seed, t, i) "
                      "only: the same at every step and in every run (not the training seed), so runs pair.")


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


class MlflowConfig(BaseModel):
    """``logging.mlflow``: log to MLflow (needs the ``mlflow`` extra: ``pip install 'swerl[mlflow]'``)."""

    model_config = ConfigDict(extra="forbid")

    tracking_uri: str | None = Field(
        None, description="MLflow tracking URI (http://server, sqlite:///file.db, file:/dir); None = RUN_DIR/mlruns."
    )
    experiment: str = Field("swerl", min_length=1, description="MLflow experiment (created when missing).")
    run_name: str | None = Field(None, description="Run name; None = the run directory's name.")
    tags: dict[str, str] = Field(default_factory=dict, description="Run tags.")
