"""`swerl tasks mine` without Docker: the tracer (run by the host's pytest), candidates, stubs,
leaks, task folders and the manifest, on the fixture project tests/fixtures/mine_project."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.tasks.harness.swerl_run_tests import parse_args
from swerl.tasks.load import load_task
from swerl.tasks.mine.candidates import Trace
from swerl.tasks.mine.functions import STUB, sites, stubbed
from swerl.tasks.mine.manifest import read_manifest
from swerl.tasks.mine.pipeline import PLUGIN, prepare, settle, task_name, write_tasks
from swerl.tasks.mine.task import difficulty_tier

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mine_project"
KEPT = {"add", "shout", "slugify", "parse_ratio", "Stack.__init__", "Stack.push", "Stack.top"}  # before the sandbox proof


def host_traces(root: Path, tmp: Path) -> list[Trace]:
    """The fixture's suite run twice by the host's pytest with the tracer, as the sandbox runs it."""
    runs = []
    env = {**os.environ, "SWERL_TRACE_ROOT": str(root), "PYTHONPATH": f"{PLUGIN.parent}:{root}",
           "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(tmp)}
    for run in (1, 2):
        out = tmp / f"trace.{run}"
        subprocess.run([sys.executable, "-m", "pytest", "-p", "swerl_trace", "-p", "no:cacheprovider", "-q", "-o",
                        "addopts="], cwd=root, env={**env, "SWERL_TRACE_OUT": str(out)}, capture_output=True, timeout=600)
        runs.append(Trace.from_json(json.loads(out.read_text())))
    return runs


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    """The fixture project, with leaks planted (a .git folder, bytecode, an egg-info copy), traced and mined."""
    tmp_path = tmp_path_factory.mktemp("mined")
    project = tmp_path / "minilib-1.0"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("__pycache__"))  # a run that imported it left some
    (project / ".git").mkdir()
    (project / ".git" / "ORIG_HEAD").write_text("ref: the answer\n")
    (project / "minilib" / "__pycache__").mkdir()
    (project / "minilib" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (project / "minilib.egg-info").mkdir()
    (project / "minilib.egg-info" / "SOURCES.txt").write_text("minilib/__init__.py\n")
    prepared = prepare(project, tmp_path / "work")
    runs = host_traces(prepared.root, tmp_path)
    out = tmp_path / "out"
    run, entries = write_tasks(prepared, runs, out)
    return prepared, run, entries, out


def test_sites_stub_keeps_signature_decorators_and_docstring():
    source = ('import functools\n\nclass A:\n    @functools.lru_cache()\n    def f(self, x: int) -> int:\n'
              '        """Doc."""\n        y = x + 1\n        return y\n\n\ndef g():\n    pass\n')
    found = {s.qualname: s for s in sites("a.py", source)}
    assert set(found) == {"A.f", "g"}
    f = found["A.f"]
    assert (f.first_line, f.def_line, f.body_line, f.end_line, f.trivial) == (4, 5, 7, 8, "")
    assert found["g"].trivial == "the body is a pass"
    new = stubbed(source, f)
    assert '    @functools.lru_cache()\n    def f(self, x: int) -> int:\n        """Doc."""\n        ' + STUB in new
    assert "y = x + 1" not in new and "def g():\n    pass" in new
    ast.parse(new)


@pytest.mark.parametrize(("body", "why"), [
    ("return 3", "the body returns a constant"), ("return None", "the body returns a constant"),
    ("return (1, 'a')", "the body returns a constant"), ("...", "the body is a constant expression"),
    ("raise NotImplementedError", "the body only raises"), ("return x", ""), ("x += 1\n    return 3", "")])
def test_trivial_bodies(body: str, why: str):
    assert sites("m.py", f"def f(x):\n    {body}\n")[0].trivial == why


def test_a_body_on_the_def_line_is_trivial():
    assert sites("m.py", "def f(x): return x * 2\n")[0].trivial == "the body is on the def line"


def test_fixture_mines_the_expected_candidates_and_the_manifest_names_every_drop(mined):
    prepared, run, entries, out = mined
    by_function = {e.function: e for e in entries}
    assert {e.function for e in entries if e.status == "kept"} == KEPT
    reasons = {name: e.reason.split(":")[0] for name, e in by_function.items() if e.status == "dropped"}
    assert reasons == {"version": "trivial", "unused": "no test", "clamp": "leak", "flaky_target": "flaky",
                       "clamp_copy": "no test"}
    assert "minilib/vendored.py" in by_function["clamp"].reason
    assert run.flaky == ["tests/test_minilib.py::test_flaky"] and run.tests_passed == 12
    assert by_function["Stack.push"].tests == ["tests/test_minilib.py::test_push[items0]",
                                               "tests/test_minilib.py::test_push[items1]"]
    assert {"tests/test_minilib.py::test_top_empty", "tests/test_minilib.py::test_push[items1]"} <= set(
        by_function["Stack.top"].tests)  # a property, reached through its decorator's line
    assert sorted(p.name for p in out.iterdir()) == sorted(e.task for e in entries if e.task)


def test_planted_leaks_are_gone_from_every_app(mined):
    prepared, run, entries, out = mined
    assert {".git", "minilib/__pycache__", "minilib.egg-info"} <= set(run.cleaned)
    for entry in (e for e in entries if e.status == "kept"):
        app = out / entry.task / "environment" / "app"
        names = {p.relative_to(app).as_posix() for p in app.rglob("*")}
        assert not [n for n in names if n.endswith(".pyc") or ".git" in n.split("/") or "egg-info" in n]
        assert "tests/test_minilib.py" not in names  # the covering tests are hidden
        body = "".join((FIXTURE / "minilib/__init__.py").read_text().splitlines(keepends=True))
        stub = (app / entry.file).read_text()
        assert STUB in stub and stub != body
    slug = next(e for e in entries if e.function == "slugify")
    assert "README.md (holds a copy of the body)" in slug.removed
    assert not (out / slug.task / "environment" / "app" / "README.md").exists()
    assert (out / next(e.task for e in entries if e.function == "add") / "environment" / "app" / "README.md").exists()


def test_a_mined_task_loads_and_states_its_tests(mined):
    prepared, run, entries, out = mined
    entry = next(e for e in entries if e.function == "Stack.top")
    task = load_task(out / entry.task)
    assert task.solution_dir is not None
    instruction = (out / entry.task / "instruction.md").read_text()
    assert "`Stack.top`" in instruction and "`minilib/__init__.py`" in instruction
    assert all(f"`{t}`" in instruction for t in entry.tests)
    test_sh = (out / entry.task / "tests" / "test.sh").read_text()
    assert f"--expect {len(entry.tests)} " in test_sh and "'/tests/repo/tests/test_minilib.py::test_push[items0]'" in test_sh
    assert (out / entry.task / "tests" / "repo" / "tests" / "test_minilib.py").is_file()
    assert "pythonpath = /app" in (out / entry.task / "tests" / "pytest.ini").read_text()
    assert entry.metadata["tier"] == "easy" and entry.metadata["tests"] == len(entry.tests)
    assert entry.metadata["body_lines"] == 3 and entry.metadata["harness"] == "in-process"


def test_the_oracle_restores_the_original_file(mined, tmp_path: Path):
    prepared, run, entries, out = mined
    entry = next(e for e in entries if e.function == "add")
    solve = (out / entry.task / "solution" / "solve.sh").read_text().replace("/app/", f"{tmp_path}/app/")
    shutil.copytree(out / entry.task / "environment" / "app", tmp_path / "app")
    (out / entry.task / "solution" / "solve.local.sh").write_text(solve)
    subprocess.run(["bash", str(out / entry.task / "solution" / "solve.local.sh")], check=True)
    assert (tmp_path / "app" / "minilib" / "__init__.py").read_text() == (FIXTURE / "minilib" / "__init__.py").read_text()


def test_settle_drops_the_broken_tasks_with_their_reason(mined, tmp_path: Path):
    prepared, run, entries, out = mined
    out = shutil.copytree(out, tmp_path / "out")
    shout = next(e for e in entries if e.function == "shout")
    manifest = settle(out, run, entries, {shout.task: "tests pass on the stub: passed (reward 1)"})
    assert not (out / shout.task).exists()
    assert read_manifest(out) == manifest
    counts = manifest.family_counts("minilib")
    assert counts["kept"] == len(KEPT) - 1 and counts["tests pass on the stub"] == 1
    assert all(e.reason for e in manifest.entries if e.status == "dropped")


def test_task_names_are_unique_and_readable():
    taken: set[str] = set()
    assert task_name("cachetools", "src/cachetools/__init__.py", "LRUCache.popitem", taken) == "cachetools-cachetools-lrucache-popitem"
    assert task_name("cachetools", "src/cachetools/__init__.py", "LRUCache.popitem", taken).endswith("-popitem-2")


def test_difficulty_tiers():
    assert [difficulty_tier(n, 3) for n in (2, 5, 6, 20, 21)] == ["easy", "easy", "medium", "medium", "hard"]
    assert difficulty_tier(2, 40) == "medium"


def test_runner_takes_node_ids_and_a_tests_folder():
    assert parse_args(["--expect", "2", "--reward", "/r", "--tests-dir", "/tests", "/tests/repo/t.py::a", "/tests/repo/t.py::b[x]"]) == (
        2, "/r", "/tests", ["/tests/repo/t.py::a", "/tests/repo/t.py::b[x]"])
    assert parse_args(["--expect", "1", "--reward", "/r", "/tests/test_solution.py"])[2] == "/tests"
    with pytest.raises(SystemExit):
        parse_args(["--expect", "1", "--reward", "/r"])


def test_a_failing_test_that_calls_the_function_leaves_app_too(tmp_path: Path):
    """A test that failed (so it judges nothing) still shows expected values: its file is not in /app."""
    from swerl.tasks.mine.candidates import candidates
    from swerl.tasks.mine.repository import ProjectText, build_repository

    root = tmp_path / "p"
    (root / "tests").mkdir(parents=True)
    (root / "lib.py").write_text("def double(x):\n    y = x * 2\n    return y\n")
    (root / "tests" / "test_ok.py").write_text("from lib import double\ndef test_ok():\n    assert double(1) == 2\n")
    (root / "tests" / "test_bad.py").write_text("from lib import double\ndef test_bad():\n    assert double(4) == 9\n")
    trace = Trace({"tests/test_ok.py::test_ok": "passed", "tests/test_bad.py::test_bad": "failed"},
                  {"tests/test_ok.py::test_ok": {("lib.py", 1)}, "tests/test_bad.py::test_bad": {("lib.py", 1)}})
    (cand,), _ = candidates(root, [trace, trace])
    assert cand.tests == ["tests/test_ok.py::test_ok"]
    repo = build_repository(ProjectText(root), cand, ["tests/test_bad.py", "tests/test_ok.py"], tmp_path / "app")
    assert not repo.dropped and sorted(p.name for p in (tmp_path / "app" / "tests").iterdir()) == []
    assert "raise NotImplementedError" in (tmp_path / "app" / "lib.py").read_text()


def test_limit_writes_the_first_tasks_and_names_the_rest(mined, tmp_path: Path):
    prepared, run, entries, out = mined
    runs = host_traces(prepared.root, tmp_path)
    _, limited = write_tasks(prepared, runs, tmp_path / "out", limit=2)
    assert [e.function for e in limited if e.status == "kept"] == ["add", "shout"]
    # the limit comes before the leak check: clamp (a leak when written) is past it too
    assert {e.function for e in limited if e.reason.startswith("limit")} == KEPT - {"add", "shout"} | {"clamp"}


def test_an_oracle_the_tamper_signal_flags_drops_its_task():
    """Mined tasks train under ``agent.on_tamper: zero``: a task whose own oracle is flagged (its
    module reaches the interpreter by reflection, say) could pay no honest solution, so it is dropped."""
    from swerl.tasks.mine.pipeline import proof_reason

    passed, failed = ("passed", 1.0, ""), ("failed", 0.0, "")
    assert proof_reason(passed, failed, []) == ""
    reason = "test-framework: /app/lib.py reaches the objects of other modules by reflection (sys.modules)"
    assert proof_reason(passed, failed, [reason]) == f"oracle flagged by the tamper signal: {reason}"


def test_the_screen_drops_a_flagged_in_process_oracle_before_writing_it_and_outside_the_limit(tmp_path: Path):
    """Fails before: every candidate was written and proven in sandboxes, a flagged oracle (its module
    names an attribute by a computed string) was found only by the proof, and it took a place of
    ``--limit``. With the sandbox's own rules as the screen it is dropped unwritten, and the next
    candidate is written in its place."""
    from swerl.sandbox.tamper.scan import static_in_process_reasons

    root = tmp_path / "p"
    (root / "tests").mkdir(parents=True)
    (root / "dyn.py").write_text("def pick(obj, name):\n    value = getattr(obj, name)\n    return value\n")
    (root / "lib.py").write_text("import re\n\nWORD = re.compile(r'\\w+')\n\n\ndef words(text):\n"
                                 "    found = WORD.findall(text)\n    return len(found)\n")
    # a local variable: not plain-value, so the in-process harness (the screen's case)
    (root / "tests" / "test_dyn.py").write_text("from dyn import pick\ndef test_pick():\n    v = pick(1, 'real')\n"
                                                "    assert v == 1\n")
    (root / "tests" / "test_lib.py").write_text("from lib import words\ndef test_words():\n    n = words('a b')\n"
                                                "    assert n == 2\n")
    prepared = prepare(root, tmp_path / "work")
    trace = Trace({"tests/test_dyn.py::test_pick": "passed", "tests/test_lib.py::test_words": "passed"},
                  {"tests/test_dyn.py::test_pick": {("dyn.py", 1)}, "tests/test_lib.py::test_words": {("lib.py", 6)}})
    _, entries = write_tasks(prepared, [trace, trace], tmp_path / "out", limit=1, screen=static_in_process_reasons)
    by_name = {e.function: e for e in entries}
    assert by_name["pick"].status == "dropped" and by_name["pick"].task is None
    assert by_name["pick"].reason.startswith("oracle flagged by the tamper signal: test-framework: /app/dyn.py uses "
                                             "getattr() of a computed name") and "(read before the proof)" in by_name["pick"].reason
    assert by_name["words"].status == "kept"  # re.compile is the pattern's, not the builtin's: no reason
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == [by_name["words"].task]
