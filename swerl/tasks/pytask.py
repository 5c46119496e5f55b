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

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from swerl.tasks.harness import PROXY, RUNNER, harness_text

DOCKERFILE = """\
FROM python:3.10-slim
WORKDIR /app
RUN pip install --no-cache-dir pytest
"""

TEST_SH = """\
#!/bin/bash
# Verifier (swerl's hardened {shape} shape): reward 1 only when swerl_run_tests.py
# finds, in pytest's JUnit report read through a pipe, that all {expected} {what} passed
# (none failed, errored, skipped or xfailed) and pytest exited 0; else reward 0.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
unset PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTEST_ADDOPTS PYTEST_PLUGINS
chmod u+rwx /logs/verifier 2>/dev/null
rm -rf /logs/verifier/reward.txt /logs/verifier/reward.json
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
# Bytecode is read from (and written to) an empty folder made now, never from a __pycache__ of /app.
pyc=$(mktemp -d /tmp/swerl-pyc.XXXXXXXXXX) || exit 1
exec python3 -I -S -X pycache_prefix="$pyc" /tests/swerl_run_tests.py --expect {expected} --reward /logs/verifier/reward.txt {tests}
"""


def verifier_script(expected: int, tests: str = "/tests/test_solution.py", *, shape: str = "pymethods2test",
                    what: str = "expected test(s)") -> str:
    """``tests/test.sh`` of swerl's hardened verifier: runs ``swerl_run_tests.py`` on ``tests`` (the
    runner's arguments after ``--reward``: test files or node ids, ``--tests-dir``) expecting
    ``expected`` passed tests, bytecode compiled into a fresh scratch prefix."""
    return TEST_SH.format(expected=expected, tests=tests, shape=shape, what=what)


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

ISOLATED_CLASS_TEST_HEADER = '''\
"""Hidden tests for {title}: class `{entry_point}` of /app/solution.py; its instances live in an isolated worker process."""
from swerl_solution_proxy import solution_class

{entry_point} = solution_class("{entry_point}", "/app")
'''


class PyTaskSpec(BaseModel):
    """Everything that differs between two pymethods2test-shaped tasks."""

    name: str = Field(description="Task folder name, e.g. 'humaneval-000'.")
    instruction: str = Field(description="Markdown shown to the agent.")
    entry_point: str = Field(description="Function the hidden tests import from `solution`.")
    solution_code: str = Field(description="Reference solution.py (the oracle).")
    test_code: str = Field(description="Body of tests/test_solution.py after the import of the entry point.")
    title: str = Field(description="Human name used in the test docstring, e.g. 'HumanEval/0'.")
    metadata: dict[str, str | int] = Field(default_factory=dict, description="[metadata] of task.toml.")
    agent_timeout_s: float = 900.0
    verifier_timeout_s: float = 120.0
    memory_mb: int = 2048
    storage_mb: int = 1024  # a function's work product; reserved per trial against the engine's free disk
    cpus: float = 1.0
    isolate_solution: bool = Field(
        default=False, description="Call the entry point through swerl_solution_proxy.py (the judge never "
        "imports the solution); needs arguments and results that are plain builtin values.")
    num_tests: int | None = Field(
        default=None, ge=1, description="Test cases pytest must report passed; None: counted in test_code.")
    entry_kind: Literal["function", "class"] = Field(
        default="function", description="What the entry point is; 'class' needs isolate_solution (the tests "
        "get a `solution_class` stand-in whose instances live in the worker).")
    app_files: dict[str, str] = Field(
        default_factory=dict, description="Files the image holds in /app before the agent starts (name -> text), "
        "e.g. the module whose function the agent completes; copied in by environment/Dockerfile.")

    @model_validator(mode="after")
    def _check(self) -> PyTaskSpec:
        if self.entry_kind == "class" and not self.isolate_solution:
            raise ValueError("entry_kind 'class' needs isolate_solution=True")
        for name in self.app_files:
            if "/" in name or name.startswith(".") or name == "Dockerfile" or not name.strip():
                raise ValueError(f"app_files: {name!r} is not a plain file name")
        return self


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
    """The task.toml text of a pymethods2test-shaped task, in Harbor's schema 1.3 spelling (:func:`harbor_toml`)."""
    return harbor_toml(spec.metadata, spec.agent_timeout_s, spec.verifier_timeout_s, spec.cpus, spec.memory_mb,
                       spec.storage_mb)


def harbor_toml(metadata: dict[str, str | int | float], agent_timeout_s: float, verifier_timeout_s: float,
                cpus: float, memory_mb: int, storage_mb: int) -> str:
    """A task.toml text in Harbor's schema 1.3 spelling, verified in the clean room, no network.
    ``storage_mb`` is reserved against the engine's free disk for every trial in flight, so it is
    sized to the task (a few MiB of work product), not Harbor's 10 GiB default.

    The work product is the top-level ``artifacts`` (it must precede the first table), so swerl
    verifies in the clean room; the verifier stays Harbor's shared one (a separate one would need a
    ``tests/Dockerfile`` in Harbor, i.e. one verifier image per task).
    """
    meta = "".join(f"{k} = {_toml_value(v)}\n" for k, v in metadata.items())
    return (
        'schema_version = "1.3"\nartifacts = ["/app"]\n\n'
        f"[metadata]\n{meta}\n"
        f"[agent]\ntimeout_sec = {agent_timeout_s!r}\n\n"
        f"[verifier]\ntimeout_sec = {verifier_timeout_s!r}\n\n"
        "[environment]\nbuild_timeout_sec = 600.0\n"
        f"cpus = {cpus!r}\nmemory_mb = {memory_mb}\nstorage_mb = {storage_mb}\nnetwork_mode = \"no-network\"\n"
    )


def dockerfile(spec: PyTaskSpec) -> str:
    """The image: :data:`DOCKERFILE`, then one ``COPY`` per file of ``spec.app_files`` (after the
    pytest layer, so tasks that differ only in their /app files share every other layer)."""
    return DOCKERFILE + "".join(f"COPY {name} /app/{name}\n" for name in sorted(spec.app_files))


def write_pytask(spec: PyTaskSpec, task_dir: Path) -> Path:
    """Write the task folder ``task_dir`` (created; must not exist yet). Returns ``task_dir``.

    Raises:
        FileExistsError: ``task_dir`` exists (callers write into a temp folder and rename).
        ValueError: the number of tests cannot be counted (see :func:`count_tests`).
    """
    expected = spec.num_tests or count_tests(spec.test_code)
    header = (ISOLATED_CLASS_TEST_HEADER if spec.entry_kind == "class" else ISOLATED_TEST_HEADER) \
        if spec.isolate_solution else TEST_HEADER
    files = {
        "instruction.md": spec.instruction,
        "task.toml": task_toml(spec),
        "environment/Dockerfile": dockerfile(spec),
        **{f"environment/{name}": text for name, text in sorted(spec.app_files.items())},
        "tests/test.sh": verifier_script(expected),
        "tests/pytest.ini": PYTEST_INI,
        f"tests/{RUNNER}": harness_text(RUNNER),
        "tests/test_solution.py": header.format(title=spec.title, entry_point=spec.entry_point)
        + "\n\n" + spec.test_code.strip("\n") + "\n",
        "solution/solution.py": spec.solution_code,
        "solution/solve.sh": SOLVE_SH,
    }
    if spec.isolate_solution:
        files[f"tests/{PROXY}"] = harness_text(PROXY)
    write_task_files(task_dir, files)
    return task_dir


STARTER_INSTRUCTION = """\
# {name}

Implement `count_vowels(text: str) -> int` in `/app/solution.py`: the number of vowels
(a, e, i, o, u, upper or lower case) in `text`.

Example: `count_vowels("Hello World")` returns 3.
"""

STARTER_SOLUTION = '''\
def count_vowels(text: str) -> int:
    """The number of vowels (a, e, i, o, u, either case) in ``text``."""
    return sum(ch in "aeiouAEIOU" for ch in text)
'''

STARTER_TESTS = '''\
def test_example():
    assert count_vowels("Hello World") == 3


def test_empty_and_no_vowels():
    assert count_vowels("") == 0
    assert count_vowels("rhythm") == 0


def test_upper_case_counts():
    assert count_vowels("AEIOU aeiou") == 10
'''


def starter_spec(name: str) -> PyTaskSpec:
    """A small working task named ``name`` to edit into one's own (``swerl tasks new``): implement
    ``count_vowels`` in ``/app/solution.py``; three hidden tests; the reference solution as oracle.
    Its oracle earns reward 1 and a null attempt 0, so ``swerl sandbox-test`` passes it as written."""
    return PyTaskSpec(name=name, instruction=STARTER_INSTRUCTION.format(name=name), entry_point="count_vowels",
                      solution_code=STARTER_SOLUTION, test_code=STARTER_TESTS, title=name,
                      metadata={"source": "swerl tasks new", "difficulty": "easy"},
                      agent_timeout_s=300.0, verifier_timeout_s=60.0, memory_mb=1024)


def write_task_files(task_dir: Path, files: dict[str, str]) -> None:
    """Create ``task_dir`` (it must not exist: FileExistsError) and write ``files`` (path relative to
    it -> UTF-8 text) into it; ``*.sh`` files are made executable."""
    task_dir.mkdir(parents=True, exist_ok=False)
    for rel, text in files.items():
        path = task_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if rel.endswith(".sh"):
            path.chmod(0o755)
