"""Write one mined task folder: the stubbed repository in ``/app``, the covering tests hidden in
``/tests``, the original file as the oracle, and swerl's hardened verifier.

Layout (Harbor schema 1.3, verified in the clean room, no network)::

    environment/Dockerfile   python:3.10-slim + pytest, then COPY app/ /app/
    environment/app/...      the repository (:mod:`swerl.tasks.mine.repository`)
    tests/test.sh            runs swerl_run_tests.py on the covering tests' node ids
    tests/pytest.ini         pinned: the project's import roots under /app on sys.path, nothing else
    tests/repo/...           the project's test files (helpers and data beside them)
    solution/solve.sh        copies the original file back over the stubbed one

That is the in-process harness: the tests import the project in pytest's process (a solution can
reach pytest), so mined task sets are meant to be trained with ``agent.on_tamper: zero`` (the
tamper signal flags a solution that reaches into pytest; see docs/tasks.md). A task whose covering
tests are all plain-value (:mod:`swerl.tasks.mine.isolated`) gets the isolated harness instead:
``tests/test_mined.py`` (the tests rewritten to call the function through
``tests/swerl_solution_proxy.py``), a ``pytest.ini`` with nothing of ``/app`` on pytest's path, and
no ``tests/repo``; the judge never imports the solution.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from swerl.tasks.harness import PROXY, RUNNER, harness_text
from swerl.tasks.mine.candidates import Candidate
from swerl.tasks.mine.isolated import TEST_FILE, IsolatedPlan, test_file_text
from swerl.tasks.pytask import DOCKERFILE, harbor_toml, verifier_script, write_task_files

TESTS_COPY = "repo"  # the project's tests live under /tests/repo/
SHOWN_TESTS = 20  # test names listed in the instruction; the rest are counted


PYTEST_INI = """\
[pytest]
# Pinned by swerl's verifier (`pytest -c /tests/pytest.ini --rootdir /tests --noconftest`).
addopts =
junit_family = xunit2
pythonpath = {roots}
"""

ISOLATED_PYTEST_INI = f"""\
[pytest]
# Pinned by swerl's verifier (`pytest -c /tests/pytest.ini --rootdir /tests --noconftest`); nothing of
# /app is on the judge's path: the tests call the function through swerl_solution_proxy.py.
addopts =
junit_family = xunit2
python_files = {TEST_FILE}
"""

SOLVE_SH = """\
#!/bin/bash
# Oracle: put the original {path} back.
set -e
cp "$(dirname "$0")/{name}" /app/{path}
"""

IN_PROCESS_HOW = "they\nrun with pytest against `/app`, importing the project from {roots}"
ISOLATED_HOW = ("they\ncall `{name}` with plain values (numbers, strings, lists, dicts, ...) in a separate process "
                "that imports\n`{module}` from {roots}, and compare what it returns, or the builtin exception "
                "it raises,\nwith the values the tests expect")

INSTRUCTION = """\
# Implement `{qualname}` in `{path}`

The repository of the Python project `{project}` is in `/app`. The body of `{qualname}` in
`/app/{path}` (defined at line {def_line}) has been replaced by `raise NotImplementedError`; its
signature, decorators and docstring are as the project wrote them. Implement it so that the
project behaves as its authors intended.

Your work is judged by {count} test(s) of the project's own suite, which are not in `/app`; {how}:

{tests}
"""


@dataclass(frozen=True)
class MinedTask:
    """What one task folder needs beyond its repository."""

    name: str
    project: str
    cand: Candidate
    roots: list[str]  # import roots relative to the project's root ('.' = the root)
    removed: list[str]
    plan: IsolatedPlan | None = None  # the isolated harness's hidden tests; None: in-process
    in_process_because: str = ""  # why there is no plan (the first test or rule that is not plain-value)

    def metadata(self) -> dict[str, str | int]:
        """The task's difficulty and provenance, for task.toml's [metadata] and the manifest."""
        site = self.cand.site
        lines = site.end_line - site.body_line + 1
        return {"source": "swerl tasks mine", "project": self.project, "file": site.path, "function": site.qualname,
                "body_lines": lines, "body_statements": site.statements, "tests": len(self.cand.tests),
                "files_touched": 1, "tier": difficulty_tier(lines, len(self.cand.tests)),
                "harness": "isolated" if self.plan else "in-process",
                **({} if self.plan else {"in_process_because": self.in_process_because}),
                "judged_by": " ".join(self.cand.tests)}


def difficulty_tier(body_lines: int, tests: int) -> str:
    """easy (<= 5 body lines), medium (<= 20), hard (longer); one tier up when over 20 tests judge it."""
    tiers = ("easy", "medium", "hard")
    tier = 0 if body_lines <= 5 else 1 if body_lines <= 20 else 2
    return tiers[min(tier + (tests > 20), 2)]


def _app_roots(roots: list[str]) -> list[str]:
    return ["/app" if r == "." else f"/app/{r}" for r in roots]


def write_mined_task(task: MinedTask, repo: Path, project_root: Path, test_files: list[str], library: list[str],
                     task_dir: Path) -> Path:
    """Write ``task_dir`` (must not exist) from the stubbed repository ``repo`` (moved into it).

    Raises:
        FileExistsError: ``task_dir`` exists.
    """
    site = task.cand.site
    shown = [f"- `{t}`" for t in task.cand.tests[:SHOWN_TESTS]]
    if len(task.cand.tests) > SHOWN_TESTS:
        shown.append(f"- and {len(task.cand.tests) - SHOWN_TESTS} more")
    roots = " and ".join(f"`{r}`" for r in _app_roots(task.roots))
    how = ISOLATED_HOW.format(name=task.plan.target.name, module=task.plan.target.module, roots=roots) if task.plan \
        else IN_PROCESS_HOW.format(roots=roots)
    name = Path(site.path).name
    files = {
        "instruction.md": INSTRUCTION.format(
            qualname=site.qualname, path=site.path, project=task.project, def_line=site.def_line,
            count=len(task.cand.tests), how=how, tests="\n".join(shown)),
        "task.toml": harbor_toml(task.metadata(), agent_timeout_s=900.0, verifier_timeout_s=300.0, cpus=1.0,
                                 memory_mb=2048, storage_mb=2048),
        "environment/Dockerfile": DOCKERFILE + "COPY app/ /app/\n",
        f"tests/{RUNNER}": harness_text(RUNNER),
        **(_isolated_tests(task.plan, len(task.cand.tests)) if task.plan else _in_process_tests(task)),
        f"solution/{name}": (project_root / site.path).read_text(encoding="utf-8"),
        "solution/solve.sh": SOLVE_SH.format(path=shlex.quote(site.path), name=shlex.quote(name)),
    }
    write_task_files(task_dir, files)
    shutil.move(str(repo), task_dir / "environment" / "app")
    if not task.plan:
        copy_tests(project_root, test_files, library, task_dir / "tests" / TESTS_COPY)
    return task_dir


def _in_process_tests(task: MinedTask) -> dict[str, str]:
    """``tests/``'s own files of the in-process harness (the project's tests are copied beside them)."""
    node_ids = [f"/tests/{TESTS_COPY}/{t}" for t in task.cand.tests]
    return {"tests/test.sh": verifier_script(
                len(node_ids), "--tests-dir /tests \\\n" + " \\\n".join(shlex.quote(n) for n in node_ids),
                shape="mined-task", what="covering test(s)"),
            "tests/pytest.ini": PYTEST_INI.format(roots=" ".join(_app_roots(task.roots)))}


def _isolated_tests(plan: IsolatedPlan, expected: int) -> dict[str, str]:
    """``tests/``'s files of the isolated harness: the rewritten tests and the proxy; ``expected``
    test cases (the covering node ids, each parametrized case of a rewritten test once)."""
    return {"tests/test.sh": verifier_script(expected, f"--tests-dir /tests /tests/{TEST_FILE}", shape="mined-task",
                                             what="covering test(s)"),
            "tests/pytest.ini": ISOLATED_PYTEST_INI,
            f"tests/{TEST_FILE}": test_file_text(plan),
            f"tests/{PROXY}": harness_text(PROXY)}


def copy_tests(root: Path, test_files: list[str], library: list[str], dest: Path) -> None:
    """Copy the project's tests under ``dest``: a root-level test file alone, else the whole top folder
    of each test file (its helpers and data), less the library's own modules."""
    skip = set(library)
    for top in sorted({t.split("/")[0] for t in test_files}):
        if (root / top).is_file():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / top, dest / top)
        else:
            shutil.copytree(root / top, dest / top, symlinks=True, dirs_exist_ok=True, ignore=lambda folder, names: [
                n for n in names if (Path(folder) / n).relative_to(root).as_posix() in skip])
