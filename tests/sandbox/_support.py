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


def rewrite_in_schema_13(task_toml: Path) -> None:
    """A HumanEval task.toml as issue 25 spells it in Harbor's schema 1.3: ``version = "1.3"``,
    top-level artifacts, a separate verifier (no [verifier.environment]: the task image), no network."""
    text = task_toml.read_text().replace('schema_version = "1.3"', 'version = "1.3"')
    assert 'artifacts = ["/app"]' in text and 'network_mode = "no-network"' in text
    task_toml.write_text(text.replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n'))
