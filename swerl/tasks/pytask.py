"""Write one pymethods2test-shaped task folder (``shared/spec/tasks.md`` §3).

The shape: implement a Python function in ``/app/solution.py``; hidden
``tests/test_solution.py`` imports it from ``solution`` (``/app`` is put on
``sys.path``); ``tests/test.sh`` gives reward 1 exactly when pytest exits 0;
``environment/Dockerfile`` is ``python:3.10-slim`` + pytest with an empty ``/app``;
``solution/`` holds the reference ``solution.py`` and a ``solve.sh`` copying it into place.

Oracle convention (shared with the sandbox's oracle runner): ``solution/`` is uploaded
to ``/solution`` and run as ``bash /solution/solve.sh``; ``solve.sh`` finds
``solution.py`` beside itself (``$(dirname "$0")``), so any upload path works.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

DOCKERFILE = """\
FROM python:3.10-slim
WORKDIR /app
RUN pip install --no-cache-dir pytest
"""

TEST_SH = """\
#!/bin/bash
# Verifier (pymethods2test shape): reward 1 exactly when pytest exits 0, else 0.
set -e
mkdir -p /logs/verifier
trap 'status=$?; if [ "$status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi' EXIT
pip3 install -q --disable-pip-version-check pytest > /dev/null 2>&1 || true
cd /app
pytest /tests/test_solution.py -v --tb=short
"""

SOLVE_SH = """\
#!/bin/bash
# Oracle: copy the reference solution beside this script to /app/solution.py.
set -e
mkdir -p /app
cp "$(dirname "$0")/solution.py" /app/solution.py
"""

TEST_HEADER = '''\
"""Hidden tests for {title}: import `{entry_point}` from /app/solution.py and check it."""
import sys

sys.path.insert(0, "/app")

from solution import {entry_point}  # noqa: E402
'''


class PyTaskSpec(BaseModel):
    """Everything that differs between two pymethods2test-shaped tasks."""

    name: str = Field(description="Task folder name, e.g. 'humaneval-000'.")
    instruction: str = Field(description="Markdown shown to the agent.")
    entry_point: str = Field(description="Function the hidden tests import from `solution`.")
    solution_code: str = Field(description="Reference solution.py (the oracle).")
    test_code: str = Field(description="Body of tests/test_solution.py after the import of the entry point.")
    title: str = Field(description="Human name used in the test docstring, e.g. 'HumanEval/0'.")
    metadata: dict[str, str] = Field(default_factory=dict, description="[metadata] of task.toml.")
    agent_timeout_s: float = 900.0
    verifier_timeout_s: float = 120.0
    memory_mb: int = 2048
    cpus: float = 1.0


def _toml_value(value: object) -> str:
    """A TOML scalar: strings as JSON-escaped basic strings (a subset TOML accepts), numbers as is."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def task_toml(spec: PyTaskSpec) -> str:
    """The task.toml text of a pymethods2test-shaped task."""
    meta = "".join(f"{k} = {_toml_value(v)}\n" for k, v in spec.metadata.items())
    return (
        'version = "1.0"\n\n'
        f"[metadata]\n{meta}\n"
        f"[agent]\ntimeout_sec = {spec.agent_timeout_s!r}\n\n"
        f"[verifier]\ntimeout_sec = {spec.verifier_timeout_s!r}\nartifacts = [\"/app\"]\n\n"
        "[environment]\nbuild_timeout_sec = 600.0\n"
        f"cpus = {spec.cpus!r}\nmemory_mb = {spec.memory_mb}\nstorage_mb = 10240\nallow_internet = false\n"
    )


def write_pytask(spec: PyTaskSpec, task_dir: Path) -> Path:
    """Write the task folder ``task_dir`` (created; must not exist yet). Returns ``task_dir``.

    Raises FileExistsError if ``task_dir`` exists; callers write into a temp folder and rename.
    """
    files = {
        "instruction.md": spec.instruction,
        "task.toml": task_toml(spec),
        "environment/Dockerfile": DOCKERFILE,
        "tests/test.sh": TEST_SH,
        "tests/test_solution.py": TEST_HEADER.format(title=spec.title, entry_point=spec.entry_point)
        + "\n\n" + spec.test_code.strip("\n") + "\n",
        "solution/solution.py": spec.solution_code,
        "solution/solve.sh": SOLVE_SH,
    }
    task_dir.mkdir(parents=True, exist_ok=False)
    for rel, text in files.items():
        path = task_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if rel.endswith(".sh"):
            path.chmod(0o755)
    return task_dir
