"""From a traced suite to candidates: each function or method with the tests that call it.

The suite ran twice (:mod:`swerl.tasks.mine.swerl_trace`); a test counts as covering only when it
passed both times, so a flaky test (passed once, failed or skipped the other time) judges nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from swerl.tasks.mine.functions import Site, sites

# Files of a project that are not its library code, whatever the suite calls in them.
NOT_LIBRARY = ("setup.py", "conftest.py", "noxfile.py", "tasks.py", "ez_setup.py", "fabfile.py")


@dataclass
class Trace:
    """One run of the traced suite: per test node id, its outcome and the (path, first line) it called."""

    outcomes: dict[str, str]
    calls: dict[str, set[tuple[str, int]]]

    @classmethod
    def from_json(cls, data: dict) -> Trace:
        """Read the plugin's JSON (``{"tests": {nodeid: {"outcome", "calls"}}}``)."""
        tests = data.get("tests", {})
        return cls({n: t.get("outcome", "failed") for n, t in tests.items()},
                   {n: {(str(p), int(line)) for p, line in t.get("calls", [])} for n, t in tests.items()})


@dataclass
class Candidate:
    """A function with its covering tests (node ids, sorted), or the reason it makes no task."""

    site: Site
    tests: list[str] = field(default_factory=list)
    dropped: str = ""
    callers: set[str] = field(default_factory=set)  # every test that called it, whatever its outcome


def stable_tests(runs: list[Trace]) -> tuple[list[str], list[str]]:
    """``(passed in every run, flaky)``: flaky tests passed in some run and not in another."""
    names = sorted(set().union(*(r.outcomes for r in runs)))
    passed = [n for n in names if all(r.outcomes.get(n) == "passed" for r in runs)]
    flaky = [n for n in names if n not in passed and any(r.outcomes.get(n) == "passed" for r in runs)]
    return passed, flaky


def test_files(runs: list[Trace]) -> list[str]:
    """The files (relative paths) that hold the collected tests."""
    return sorted({n.split("::")[0] for r in runs for n in r.outcomes})


def library_files(root: Path, tests: list[str]) -> list[str]:
    """The project's Python files (relative, '/'-separated) that are library code: not a test file,
    not in a folder that holds tests, not a setup or task script, not the docs."""
    test_dirs = {str(Path(t).parent) for t in tests if "/" in t}
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        if (rel in tests or path.name in NOT_LIBRARY or path.name.startswith("test_") or path.name.endswith("_test.py")
                or parts[0] in ("docs", "doc", "examples", "benchmarks", "scripts")
                or any(rel.startswith(d + "/") for d in test_dirs)):
            continue
        found.append(rel)
    return found


def candidates(root: Path, runs: list[Trace]) -> tuple[list[Candidate], list[str]]:
    """Every function and method of the library files with its covering tests (passed in every run),
    and the flaky tests; a function no stable test calls is a dropped candidate."""
    passed, flaky = stable_tests(runs)
    files = test_files(runs)
    by_key: dict[tuple[str, int], list[Candidate]] = {}
    found: list[Candidate] = []
    for rel in library_files(root, files):
        try:
            file_sites = sites(rel, (root / rel).read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a file that does not parse under this Python makes no task
        for site in file_sites:
            cand = Candidate(site)
            found.append(cand)
            for line in {site.first_line, site.def_line}:
                by_key.setdefault((rel, line), []).append(cand)
    called_by_flaky: set[int] = set()
    for test in sorted(set().union(*(r.outcomes for r in runs))):
        for key in set().union(*(r.calls.get(test, set()) for r in runs)):
            for cand in by_key.get(key, []):
                cand.callers.add(test)
                if test in flaky:
                    called_by_flaky.add(id(cand))
                elif test in passed and test not in cand.tests:
                    cand.tests.append(test)
    for cand in found:
        cand.tests.sort()
        if not cand.tests and id(cand) in called_by_flaky:
            cand.dropped = "flaky: only tests that passed in one run and not in the other call it"
        elif not cand.tests:
            cand.dropped = "no test: no test that passed in every run calls it"
        elif cand.site.trivial:
            cand.dropped = f"trivial: {cand.site.trivial}"
    return found, flaky
