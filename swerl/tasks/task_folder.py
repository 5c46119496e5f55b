"""Pydantic models of a Harbor-format task folder (``instruction.md``, ``task.toml``,
``environment/``, ``tests/``, ``solution/``); see docs/tasks.md."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple, overload

from pydantic import BaseModel, ConfigDict

from swerl.errors import TaskError
from swerl.tasks.task_toml import ARTIFACTS_DIR, MAX_TIMEOUT_S, TaskConfig

__all__ = ["MAX_TIMEOUT_S", "MalformedTask", "Task", "TaskConfig", "TaskProblem", "TaskSet"]

VerifierImage = Literal["task_image", "docker_image", "tests_dockerfile"]


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

    @property
    def verifier_image(self) -> VerifierImage:
        """Where a separate verifier's image comes from: ``[verifier.environment] docker_image``, else
        ``tests/Dockerfile`` (Harbor builds it with ``tests/`` as the context), else the task image
        (``task_image``, also for every shared verifier)."""
        verifier = self.config.verifier
        if verifier.mode != "separate":
            return "task_image"
        if verifier.environment is not None and verifier.environment.docker_image:
            return "docker_image"
        return "tests_dockerfile" if (self.tests_dir / "Dockerfile").is_file() else "task_image"

    @property
    def tests_in_verifier_image(self) -> bool:
        """True when the tests belong to the verifier's own image (``/tests`` is baked in there,
        so ``tests/`` is not uploaded again); False when they are uploaded at verification."""
        return self.verifier_image != "task_image"

    @property
    def auto_verification(self) -> Literal["clean_room", "same_container"]:
        """Where the tests run under ``verification: auto``: the clean room for a separate verifier
        and for declared artifacts (either spelling), unless ``[verifier] same_container = true``."""
        verifier = self.config.verifier
        if verifier.mode == "separate":
            return "clean_room"
        if self.config.work_product is None or verifier.same_container:
            return "same_container"
        return "clean_room"

    @property
    def clean_room_paths(self) -> list[str] | None:
        """What the clean room carries over: the declared artifacts plus Harbor's convention folder
        ``/logs/artifacts`` (each path once, none below another); None when the task declares no
        artifacts and its verifier is not separate (a forced clean room then takes the WORKDIR)."""
        declared = self.config.work_product
        if declared is None and self.config.verifier.mode != "separate":
            return None
        paths = [*(declared or []), ARTIFACTS_DIR]
        return [p for p in dict.fromkeys(paths) if not any(p.startswith(q + "/") for q in paths)]


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
