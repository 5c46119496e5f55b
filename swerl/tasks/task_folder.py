"""Pydantic models of a Harbor-format task folder (``instruction.md``, ``task.toml``,
``environment/``, ``tests/``, ``solution/``); see docs/tasks.md."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, overload

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swerl.errors import TaskError

# Longest timeout task.toml may ask for, seconds (one day): larger values are typos (1e12) or
# ways to park a sandbox forever.
MAX_TIMEOUT_S = 86_400.0
# Paths that can never be a work product: the verifier owns /tests and /logs, the kernel the rest.
_NOT_ARTIFACTS = ("/tests", "/logs", "/proc", "/sys", "/dev")


def _timeout(default: float, what: str) -> Any:
    """A finite timeout field in seconds, in (0, one day]."""
    return Field(default, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False, description=f"{what}, seconds (at most one day).")


class _Section(BaseModel):
    # Unknown keys are kept (``extra="allow"``); the loader warns about them once.
    model_config = ConfigDict(extra="allow")


class AgentSection(_Section):
    """``[agent]`` of task.toml."""

    timeout_sec: float = _timeout(600.0, "Wall-clock budget of the agent")


class VerifierSection(_Section):
    """``[verifier]`` of task.toml."""

    timeout_sec: float = _timeout(600.0, "Wall-clock budget of tests/test.sh")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for test.sh.")
    restart_environment: bool = Field(
        False, description="Harbor's restart before verifying; swerl does not restart, so only false is accepted "
        "(use `artifacts` to verify in a fresh container of the pristine image).",
    )
    artifacts: list[str] | None = Field(
        None,
        description=(
            "The agent's work product: absolute paths (e.g. [\"/app\"]) copied from the agent's container into a "
            "fresh container of the pristine image, where the tests run (clean-room verification). None: the task "
            "declares none, and is verified in the agent's own container unless the run forces the clean room."
        ),
    )
    same_container: bool = Field(
        False,
        description="Verify in the agent's container even when artifacts are declared (a verifier that inspects "
        "the whole environment the agent left); a run's `verification = \"clean_room\"` overrides it.",
    )

    @field_validator("restart_environment")
    @classmethod
    def _no_restart(cls, value: bool) -> bool:
        if value:
            raise ValueError("restart_environment = true is not supported: remove it, or declare `artifacts` "
                             "to verify in a fresh container")
        return value

    @field_validator("artifacts")
    @classmethod
    def _artifact_paths(cls, paths: list[str] | None) -> list[str] | None:
        """Absolute, normalized, not ``/`` and not the verifier's own folders; duplicates dropped."""
        if paths is None:
            return None
        clean: list[str] = []
        for raw in paths:
            parts = [p for p in raw.split("/") if p not in ("", ".")]
            if not raw.startswith("/") or ".." in parts or not parts:
                raise ValueError(f"{raw!r} must be an absolute path below / without '..' (e.g. \"/app\")")
            path = "/" + "/".join(parts)
            if any(path == p or path.startswith(p + "/") for p in _NOT_ARTIFACTS):
                raise ValueError(f"{raw!r} is not a work product (the verifier owns /tests and /logs)")
            if path not in clean:
                clean.append(path)
        return clean


class EnvironmentSection(_Section):
    """``[environment]`` of task.toml."""

    build_timeout_sec: float = _timeout(600.0, "Image build budget")
    docker_image: str | None = Field(None, description="Prebuilt image; skips the build when set.")
    cpus: float = Field(1.0, gt=0, le=1024, allow_inf_nan=False, description="CPU limit of the container (cores).")
    memory_mb: int = Field(2048, gt=0, le=1 << 20, description="Memory limit of the container, MiB.")
    storage_mb: int = Field(
        10240, gt=0, le=1 << 24,
        description="Disk budget of the container's writable layer (allocated blocks), MiB: swerl kills a container "
        "past it (the trial ends as disk_limit: the attempt's fault unless a control run fails too); see "
        "SandboxConfig.disk_poll_s.",
    )
    gpus: int = Field(0, ge=0, description="GPUs requested: swerl runs CPU sandboxes only, so only 0 is accepted.")
    allow_internet: bool = Field(
        False,
        description="Task asks for network. swerl grants it only with --allow-network (Harbor defaults true).",
    )

    @field_validator("gpus")
    @classmethod
    def _no_gpus(cls, value: int) -> int:
        if value:
            raise ValueError(f"gpus = {value} is not supported: swerl runs CPU sandboxes only; set gpus = 0 or remove it")
        return value


class TaskConfig(_Section):
    """The whole ``task.toml`` with the defaults of docs/tasks.md."""

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

    @property
    def dockerfile(self) -> Path | None:
        """``<task>/environment/Dockerfile``; None when ``[environment] docker_image`` names a prebuilt image."""
        if self.config.environment.docker_image:
            return None
        return self.environment_dir / "Dockerfile"

    @property
    def test_script(self) -> Path:
        """``<task>/tests/test.sh``, run as ``bash /tests/test.sh`` by the verifier."""
        return self.tests_dir / "test.sh"


class MalformedTask(TaskError):
    """A task folder or dataset row is malformed (exit 2).

    Attributes:
        file: the file, folder or ``<dataset>#<row>`` that is wrong.
        reason: what is wrong and, where it helps, the fix (one line).
    """

    def __init__(self, file: Path | str, reason: str) -> None:
        self.file = str(file)
        self.reason = reason
        super().__init__(f"{self.file}: {reason}")


class TaskProblem(NamedTuple):
    """One task left out of a :class:`TaskSet`: where (file or dataset row) and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class TaskSet(Sequence[Task]):
    """The tasks loaded from one source, in order, plus the malformed ones left out.

    Behaves as a read-only sequence of :class:`Task`; ``problems`` lists the
    ``(path, reason)`` of every task skipped with ``on_error="skip"``.
    """

    source: Path
    tasks: tuple[Task, ...]
    problems: tuple[TaskProblem, ...] = ()

    @overload
    def __getitem__(self, index: int) -> Task: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Task]: ...
    def __getitem__(self, index: int | slice) -> Task | Sequence[Task]:
        return self.tasks[index]

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    @property
    def names(self) -> list[str]:
        """Task names in load order."""
        return [t.name for t in self.tasks]

    def by_name(self, name: str) -> Task:
        """The task called ``name``; raises KeyError if absent."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)
