"""Write one pymethods2test-shaped task folder, with swerl's hardened verifier.

The shape (the pymethods2test generator of ``open-thoughts/OpenThoughts-Agent``): implement a
Python function in ``/app/solution.py``; hidden ``tests/test_solution.py`` checks it;
``environment/Dockerfile`` is ``python:3.10-slim`` + pytest with an empty ``/app``;
``solution/`` holds the reference ``solution.py`` and a ``solve.sh`` copying it into place.

The verifier departs from the original's "reward 1 when pytest exits 0" (which ``os._exit(0)``
at import, a planted ``pytest.ini`` or a skip forge): ``tests/test.sh`` runs
``tests/swerl_run_tests.py`` (see :mod:`swerl.tasks.harness`), which pins pytest's
configuration and gives reward 1 only when pytest's JUnit report, read through a pipe, shows
exactly the expected number of tests passed and pytest exited 0. With
``isolate_solution`` the tests call the function through ``swerl_solution_proxy.py``: the
solution runs in a separate confined worker and only plain builtin values come back.

Oracle convention (shared with the sandbox's oracle runner): ``solution/`` is uploaded
to ``/solution`` and run as ``bash /solution/solve.sh``; ``solve.sh`` finds
``solution.py`` beside itself (``$(dirname "$0")``), so any upload path works.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from pydantic import BaseModel, Field

from swerl.tasks.harness import PROXY, RUNNER, harness_text

DOCKERFILE = """\
FROM python:3.10-slim
WORKDIR /app
RUN pip install --no-cache-dir pytest
"""

TEST_SH = """\
#!/bin/bash
# Verifier (swerl's hardened pymethods2test shape): reward 1 only when swerl_run_tests.py
# finds, in pytest's JUnit report read through a pipe, that all {expected} expected test(s) passed
# (none failed, errored, skipped or xfailed) and pytest exited 0; else reward 0.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
unset PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTEST_ADDOPTS PYTEST_PLUGINS
chmod u+rwx /logs/verifier 2>/dev/null
rm -rf /logs/verifier/reward.txt /logs/verifier/reward.json
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
exec python3 -I -S /tests/swerl_run_tests.py --expect {expected} --reward /logs/verifier/reward.txt /tests/test_solution.py
"""

# Read with `-c`, so no pytest.ini, tox.ini, setup.cfg or pyproject.toml elsewhere is.
PYTEST_INI = """\
[pytest]
# Pinned by swerl's verifier (`pytest -c /tests/pytest.ini --rootdir /tests --noconftest`).
addopts =
junit_family = xunit2
python_files = test_solution.py
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

sys.path.append("/app")  # last, so nothing in /app shadows a module the tests or pytest import

from solution import {entry_point}  # noqa: E402
'''

ISOLATED_TEST_HEADER = '''\
"""Hidden tests for {title}: `{entry_point}` of /app/solution.py, called in an isolated worker process."""
from swerl_solution_proxy import solution_function

{entry_point} = solution_function("{entry_point}", "/app")
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
    isolate_solution: bool = Field(
        default=False, description="Call the entry point through swerl_solution_proxy.py (the judge never "
        "imports the solution); needs arguments and results that are plain builtin values.")
    num_tests: int | None = Field(
        default=None, ge=1, description="Test cases pytest must report passed; None: counted in test_code.")


def count_tests(test_code: str) -> int:
    """Test cases pytest collects from ``test_code`` under its default names: top-level
    ``test*`` functions and ``test*`` methods of ``Test*`` classes or ``unittest.TestCase``
    subclasses.

    Raises:
        ValueError: the code does not parse, holds no test, or parametrizes one (pass ``num_tests``).
    """
    tree = ast.parse(test_code)
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            functions.append(node)
        elif isinstance(node, ast.ClassDef) and (node.name.startswith("Test") or any(
                ast.unparse(base).endswith("TestCase") for base in node.bases)):
            functions += [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                          and m.name.startswith("test")]
    if any("parametrize" in ast.unparse(d) for f in functions for d in f.decorator_list):
        raise ValueError("test_code parametrizes a test; give PyTaskSpec.num_tests explicitly")
    if not functions:
        raise ValueError("test_code holds no test function (test* or Test*.test*)")
    return len(functions)


def _toml_value(value: object) -> str:
    """A TOML scalar: strings as JSON-escaped basic strings (a subset TOML accepts), numbers as is."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def task_toml(spec: PyTaskSpec) -> str:
    """The task.toml text of a pymethods2test-shaped task, in Harbor's schema 1.3 spelling.

    The work product is the top-level ``artifacts`` (it must precede the first table), so swerl
    verifies in the clean room; the verifier stays Harbor's shared one (a separate one would need a
    ``tests/Dockerfile`` in Harbor, i.e. one verifier image per task).
    """
    meta = "".join(f"{k} = {_toml_value(v)}\n" for k, v in spec.metadata.items())
    return (
        'schema_version = "1.3"\nartifacts = ["/app"]\n\n'
        f"[metadata]\n{meta}\n"
        f"[agent]\ntimeout_sec = {spec.agent_timeout_s!r}\n\n"
        f"[verifier]\ntimeout_sec = {spec.verifier_timeout_s!r}\n\n"
        "[environment]\nbuild_timeout_sec = 600.0\n"
        f"cpus = {spec.cpus!r}\nmemory_mb = {spec.memory_mb}\nstorage_mb = 10240\nnetwork_mode = \"no-network\"\n"
    )


def write_pytask(spec: PyTaskSpec, task_dir: Path) -> Path:
    """Write the task folder ``task_dir`` (created; must not exist yet). Returns ``task_dir``.

    Raises:
        FileExistsError: ``task_dir`` exists (callers write into a temp folder and rename).
        ValueError: the number of tests cannot be counted (see :func:`count_tests`).
    """
    expected = spec.num_tests or count_tests(spec.test_code)
    header = ISOLATED_TEST_HEADER if spec.isolate_solution else TEST_HEADER
    files = {
        "instruction.md": spec.instruction,
        "task.toml": task_toml(spec),
        "environment/Dockerfile": DOCKERFILE,
        "tests/test.sh": TEST_SH.format(expected=expected),
        "tests/pytest.ini": PYTEST_INI,
        f"tests/{RUNNER}": harness_text(RUNNER),
        "tests/test_solution.py": header.format(title=spec.title, entry_point=spec.entry_point)
        + "\n\n" + spec.test_code.strip("\n") + "\n",
        "solution/solution.py": spec.solution_code,
        "solution/solve.sh": SOLVE_SH,
    }
    if spec.isolate_solution:
        files[f"tests/{PROXY}"] = harness_text(PROXY)
    task_dir.mkdir(parents=True, exist_ok=False)
    for rel, text in files.items():
        path = task_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if rel.endswith(".sh"):
            path.chmod(0o755)
    return task_dir
