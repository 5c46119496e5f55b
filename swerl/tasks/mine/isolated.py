"""Which harness a mined task gets, and the hidden test file of an isolated one.

A candidate is judged through the isolated harness (``swerl_solution_proxy.py``: the judge never
imports ``/app``, the mined function runs in a confined worker and plain values come back) when it
is a module-level function and every covering test is plain-value (:mod:`swerl.tasks.mine.plain`),
every parametrized case of those tests covers it (so the rewritten tests count exactly the covering
node ids), and no ``conftest.py`` above a test file runs hooks, autouse fixtures or module-level code.
Any other candidate stays in-process: its tests import the project into pytest's own interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from swerl.tasks.mine.candidates import Candidate
from swerl.tasks.mine.plain import PlainTest, Target, binding_name, module_problem, plain_test, site_module

TEST_FILE = "test_mined.py"  # the isolated task's hidden tests, in /tests

HEADER = '''\
"""Hidden tests of `{module}.{name}`: the project's covering tests, rewritten to call it in an isolated
worker process (swerl_solution_proxy.py) with the same literal values; the judge never imports /app."""
import builtins
import contextlib

import pytest
from swerl_solution_proxy import SolutionError, solution_function

{binding} = solution_function({name!r}, "/app", {module!r}, {roots!r})


@contextlib.contextmanager
def _raises(expected):
    """`pytest.raises(expected)` for a call that runs in the worker: it raised `expected` or a
    subclass of it (the nearest builtin class it derives from crosses back by name)."""
    with pytest.raises(SolutionError) as info:
        yield
    base = getattr(builtins, info.value.exc_base or "", None)
    assert isinstance(base, type) and issubclass(base, expected), (
        f"raised {{info.value.exc_base or 'no exception of its own'}} ({{info.value}}), want {{expected.__name__}}")
'''


@dataclass(frozen=True)
class IsolatedPlan:
    """An isolated task's hidden tests: the target as the worker imports it, and each covering test
    function rewritten (with the node id of the file and function it came from)."""

    target: Target
    roots: list[str]  # the worker's import folders, e.g. ['/app/src', '/app']
    tests: list[tuple[str, PlainTest]]  # ('tests/test_x.py::test_y', its rewrite)


def harness_plan(root: Path, cand: Candidate, collected: set[str], roots: list[str]) -> IsolatedPlan | str:
    """The isolated plan of ``cand`` (``root``: the clean project; ``collected``: every node id the
    suite collected; ``roots``: its import roots), or why it stays in-process (one line)."""
    site = cand.site
    if "." in site.qualname:
        return "a method (the isolated harness judges module-level functions)"
    module = site_module(site.path, roots)
    if module is None:
        return f"{site.path} is under no import root as a module"
    target = Target(site.qualname, module)
    groups: dict[str, list[str]] = {}
    for node_id in cand.tests:
        base = node_id.split("[")[0]
        if base.count("::") != 1:
            return f"{node_id} is a method of a test class"
        groups.setdefault(base, []).append(node_id)
    tests: list[tuple[str, PlainTest]] = []
    for base, ids in groups.items():
        every = {n for n in collected if n == base or n.startswith(base + "[")}
        if every - set(ids):
            return f"{base}: a parametrized case of it does not cover {site.qualname} (or did not pass twice)"
        path, name = base.split("::")
        why = _conftest_problem(root, path) or _file_problem(root, path)
        if why:
            return why
        found = plain_test((root / path).read_text(encoding="utf-8"), name, target)
        if isinstance(found, str):
            return f"{path}: {found}"
        tests.append((base, found))
    app_roots = ["/app" if r == "." else f"/app/{r}" for r in roots]
    return IsolatedPlan(target, app_roots, tests)


def _file_problem(root: Path, path: str) -> str:
    try:
        why = module_problem((root / path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return f"{path} is unreadable"
    return f"{path}: {why}" if why else ""


def _conftest_problem(root: Path, test_path: str) -> str:
    """Why a ``conftest.py`` that applies to ``test_path`` could change what its tests see, '' if none does."""
    folder = Path(test_path).parent
    for parent in [folder, *folder.parents]:
        conftest = root / parent / "conftest.py"
        if conftest.is_file():
            why = _file_problem(root, (parent / "conftest.py").as_posix())
            if why:
                return why
    return ""


def test_file_text(plan: IsolatedPlan) -> str:
    """``tests/test_mined.py``: the proxy's stand-in for the target, then each rewritten test (renamed
    ``name_2``, ... where two files share a name) under a comment naming its original."""
    target = plan.target
    parts = [HEADER.format(module=target.module, name=target.name, binding=binding_name(target), roots=plan.roots)]
    taken: set[str] = set()
    for origin, test in plan.tests:
        name, n = test.func.name, 1
        while name in taken:
            n += 1
            name = f"{test.func.name}_{n}"
        taken.add(name)
        parts.append(f"# {origin}\n{test.source(name)}\n")
    return "\n\n".join(parts)
