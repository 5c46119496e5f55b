"""Helpers of the sandbox tests: fixture tasks, an event-loop runner, leak checks by run id."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from swerl.tasks import load_task
from swerl.tasks.task_folder import Task

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sandbox_tasks"
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine on a fresh event loop (the tests are plain functions)."""
    return asyncio.run(coro)


def fixture_task(name: str) -> Task:
    """A misbehaving (or well-behaved) task folder under tests/fixtures/sandbox_tasks."""
    return load_task(FIXTURES / name)


def copy_task(name: str, dest: Path) -> Path:
    """A writable copy of a fixture task (for tests that add files to it)."""
    target = dest / name
    shutil.copytree(FIXTURES / name, target)
    return target


def containers_of(client, run_id: str) -> list:
    """Containers (any state) labelled with this run id."""
    return client.containers.list(all=True, filters={"label": f"swerl.run={run_id}"})
