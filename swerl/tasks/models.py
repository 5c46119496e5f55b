"""Pydantic models of a Harbor-format task folder (``instruction.md``, ``task.toml``,
``environment/``, ``tests/``, ``solution/``); see ``shared/spec/tasks.md`` §1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    # Unknown keys are kept (``extra="allow"``); the loader warns about them once.
    model_config = ConfigDict(extra="allow")


class AgentSection(_Section):
    """``[agent]`` of task.toml."""

    timeout_sec: float = Field(600.0, gt=0, description="Wall-clock budget of the agent, seconds.")


class VerifierSection(_Section):
    """``[verifier]`` of task.toml."""

    timeout_sec: float = Field(600.0, gt=0, description="Wall-clock budget of tests/test.sh, seconds.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for test.sh.")
    restart_environment: bool = Field(False, description="Restart the container before verifying.")


class EnvironmentSection(_Section):
    """``[environment]`` of task.toml."""

    build_timeout_sec: float = Field(600.0, gt=0, description="Image build budget, seconds.")
    docker_image: str | None = Field(None, description="Prebuilt image; skips the build when set.")
    cpus: float = Field(1.0, gt=0, description="CPU limit of the container (cores).")
    memory_mb: int = Field(2048, gt=0, description="Memory limit of the container, MiB.")
    storage_mb: int = Field(10240, gt=0, description="Disk budget, MiB (advisory on overlayfs).")
    gpus: int = Field(0, ge=0, description="GPUs requested (swerl runs CPU sandboxes only).")
    allow_internet: bool = Field(
        False,
        description="Task asks for network. swerl grants it only with --allow-network (Harbor defaults true).",
    )


class TaskConfig(_Section):
    """The whole ``task.toml`` with the spec's defaults."""

    version: str = "1.0"
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)


class Task(BaseModel):
    """One loaded, validated task folder.

    Attributes:
        name: folder name (e.g. ``pymethods2test-0007``, ``humaneval-12``).
        path: absolute path of the task folder.
        instruction: text of ``instruction.md`` shown to the agent.
        config: parsed ``task.toml``.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    path: Path
    instruction: str
    config: TaskConfig

    @property
    def environment_dir(self) -> Path:
        """``<task>/environment`` (holds the Dockerfile)."""
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        """``<task>/tests`` (holds test.sh); uploaded to ``/tests`` only at verification."""
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path | None:
        """``<task>/solution`` when it holds ``solve.sh``, else None."""
        d = self.path / "solution"
        return d if (d / "solve.sh").is_file() else None
