"""Mined tasks on the isolated harness, without Docker: the plain-value classifier (each rule can
fail), the harness plan of a candidate, and an isolated task of the fixture project judged by its
real runner and proxy on the host (real pytest, real worker processes, real Landlock)."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.tasks.mine.candidates import Candidate
from swerl.tasks.mine.functions import sites
from swerl.tasks.mine.isolated import TEST_FILE, harness_plan
from swerl.tasks.mine.plain import PlainTest, Target, binding_name, plain_test, site_module

TARGET = Target("ratio", "pkg.maths")
HEAD = "import pytest\nimport pkg.maths\nimport pkg.maths as pm\nfrom pkg.maths import ratio\nfrom pkg import maths\n\n\n"


def _landlock_abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))


@pytest.mark.parametrize(("test", "rewritten"), [
    ("def test_x():\n    assert ratio(1, 2) == 0.5\n", "assert ratio(1, 2) == 0.5"),
    ("def test_x():\n    assert 0.5 == pm.ratio(1, 2), 'half'\n", "assert 0.5 == ratio(1, 2), 'half'"),
    ("def test_x():\n    assert pkg.maths.ratio(1, den=2) != 1\n", "assert ratio(1, den=2) != 1"),
    ("def test_x():\n    assert maths.ratio(0, 1) is not None\n", "assert ratio(0, 1) is not None"),
    ("def test_x():\n    assert not ratio(0, 1)\n    assert ratio(1, 1)\n", "assert not ratio(0, 1)\n    assert ratio(1, 1)"),
    ("def test_x():\n    with pytest.raises(ZeroDivisionError):\n        ratio(1, 0)\n",
     "with _raises(ZeroDivisionError):\n        ratio(1, 0)"),
    ("@pytest.mark.parametrize('a, b, want', [(1, 2, 0.5), (3, -4, -0.75)])\ndef test_x(a, b, want):\n"
     "    '''Doc.'''\n    assert ratio(a, b) == want\n", "assert ratio(a, b) == want"),
    ("@pytest.mark.parametrize(['a'], [(1,), (2,)])\n@pytest.mark.parametrize('b', [1, 2])\ndef test_x(a, b):\n"
     "    assert ratio(a, b) == {'a': (1, [2.0, None])}\n", "assert ratio(a, b) == {'a': (1, [2.0, None])}"),
])
def test_plain_value_tests_are_rewritten_to_call_the_binding(test: str, rewritten: str):
    found = plain_test(HEAD + test, "test_x", TARGET)
    assert isinstance(found, PlainTest), found
    assert rewritten in found.source()
    assert "pkg.maths.ratio" not in found.source() and "pm." not in found.source() and "maths.ratio" not in found.source()


@pytest.mark.parametrize(("test", "why"), [
    ("def test_x(tmp_path):\n    assert ratio(1, 2) == 0.5\n", "takes a fixture"),
    ("def helper():\n    return 2\n\n\ndef test_x():\n    assert ratio(1, helper()) == 0.5\n", "not a literal"),
    ("def test_x():\n    assert ratio(1, 2) == pkg.maths.HALF\n", "literal or a parametrized name"),
    ("def test_x():\n    assert pkg.maths.other(1, 2) == 0.5\n", "other than a call of ratio"),
    ("def test_x():\n    n = 2\n    assert ratio(1, n) == 0.5\n", "only assert and with pytest.raises"),
    ("def test_x():\n    for n in (1, 2):\n        assert ratio(1, n)\n", "only assert and with pytest.raises"),
    ("def test_x():\n    assert 0 < ratio(1, 2) < 1\n", "chained comparison"),
    ("def test_x():\n    assert ratio(1, 2) < 1\n", "only ==, != and is"),
    ("def test_x():\n    assert ratio(1, 2) is 0.5\n", "other than None, True or False"),
    ("def test_x():\n    assert ratio(1, 2) == ratio(2, 4)\n", "literal or a parametrized name"),
    ("def test_x():\n    assert ratio(*[1, 2]) == 0.5\n", "*args"),
    ("def test_x():\n    assert ratio(1, 2) == 0.5, f'{1}'\n", "message that is not a literal"),
    ("def test_x():\n    with pytest.raises(ValueError, match='zero'):\n        ratio(1, 0)\n", "no match="),
    ("class MyError(Exception):\n    pass\n\n\ndef test_x():\n    with pytest.raises(MyError):\n        ratio(1, 0)\n",
     "not a builtin exception"),
    ("def test_x():\n    with pytest.raises(ValueError) as info:\n        ratio(1, 0)\n", "around one call"),
    ("def test_x():\n    assert ratio(1, 2) == 0.5\n    assert True\n", "other than a call of ratio"),
    ("def test_x():\n    '''Only a docstring.'''\n", "never calls ratio"),
    ("@pytest.mark.skipif(False, reason='x')\ndef test_x():\n    assert ratio(1, 2) == 0.5\n", "decorator other than"),
    ("@pytest.mark.parametrize('a', [pkg.maths.HALF])\ndef test_x(a):\n    assert ratio(1, a)\n", "decorator other than"),
    ("@pytest.mark.parametrize('ratio', [1])\ndef test_x(ratio):\n    assert pm.ratio(1, ratio)\n",
     "parameter named ratio"),
    ("async def test_x():\n    assert ratio(1, 2) == 0.5\n", "not one plain module-level def"),
    ("class TestX:\n    def test_x(self):\n        assert ratio(1, 2) == 0.5\n", "not one plain module-level def"),
    ("pkg.maths.SCALE = 3\n\n\ndef test_x():\n    assert ratio(1, 2) == 0.5\n", "runs code at module level"),
    ("@pytest.fixture(autouse=True)\ndef scale():\n    pass\n\n\ndef test_x():\n    assert ratio(1, 2) == 0.5\n",
     "autouse fixture"),
    ("def setup_module():\n    pass\n\n\ndef test_x():\n    assert ratio(1, 2) == 0.5\n", "hook"),
    ("pytestmark = 'x'\n\n\ndef test_x():\n    assert ratio(1, 2) == 0.5\n", "sets pytestmark"),
    ("from .helpers import thing\n\n\ndef test_x():\n    assert ratio(1, 2) == 0.5\n", "relative or star import"),
    ("ratio = 3\n\n\ndef test_x():\n    assert ratio(1, 2) == 0.5\n", "binds ratio twice"),
    ("def test_x():\n    assert pkg(1, 2) == 0.5\n", "other than a call of ratio"),
])
def test_each_rule_of_the_classifier_can_fail(test: str, why: str):
    found = plain_test(HEAD + test, "test_x", TARGET)
    assert isinstance(found, str) and why in found, found


def test_the_module_must_be_the_functions_own_or_a_package_above_it():
    test = "from pkg.other import ratio\n\n\ndef test_x():\n    assert ratio(1, 2) == 0.5\n"
    assert isinstance(plain_test(test, "test_x", TARGET), str)
    assert isinstance(plain_test(test.replace("pkg.other", "pkg"), "test_x", TARGET), PlainTest)  # re-exported
    assert site_module("src/pkg/maths.py", ["src", "."]) == "pkg.maths"
    assert site_module("pkg/__init__.py", ["."]) == "pkg" and site_module("my-tools/x.py", ["."]) is None


def test_the_binding_never_shadows_a_builtin_or_is_collected_as_a_test():
    test = "from pkg.maths import {0}\n\n\ndef test_x():\n    assert {0}([3, 1]) == 1\n"
    for name, binding in (("ratio", "ratio"), ("min", "_mined_min"), ("test_helper", "_mined_test_helper")):
        found = plain_test(test.format(name), "test_x", Target(name, "pkg.maths"))
        assert isinstance(found, PlainTest) and binding_name(Target(name, "pkg.maths")) == binding
        assert f"assert {binding}([3, 1]) == 1" in found.source()


def _project(tmp_path: Path, tests: str, conftest: str | None = None) -> tuple[Path, Candidate]:
    root = tmp_path / "p"
    (root / "tests").mkdir(parents=True)
    (root / "lib.py").write_text("def double(x):\n    y = x * 2\n    return y\n\n\nclass C:\n    def m(self):\n"
                                 "        y = 1\n        return y\n")
    (root / "tests" / "test_lib.py").write_text(tests)
    if conftest is not None:
        (root / "tests" / "conftest.py").write_text(conftest)
    return root, Candidate(sites("lib.py", (root / "lib.py").read_text())[0])


PARAM_TESTS = ("import pytest\nfrom lib import double\n\n\n@pytest.mark.parametrize('x', [1, 2])\n"
               "def test_d(x):\n    assert double(x) != 0\n")


def test_a_plan_covers_exactly_the_covering_node_ids(tmp_path: Path):
    root, cand = _project(tmp_path, PARAM_TESTS)
    cand.tests = ["tests/test_lib.py::test_d[1]", "tests/test_lib.py::test_d[2]"]
    plan = harness_plan(root, cand, set(cand.tests), ["."])
    assert not isinstance(plan, str) and plan.target == Target("double", "lib") and plan.roots == ["/app"]
    # one parametrized case that did not cover it (or failed): the rewrite would run it too
    why = harness_plan(root, cand, {*cand.tests, "tests/test_lib.py::test_d[3]"}, ["."])
    assert isinstance(why, str) and "parametrized case" in why


@pytest.mark.parametrize(("conftest", "stays"), [
    ("import pytest\n\n\n@pytest.fixture\ndef data():\n    return 1\n", False),
    ("import pytest\n\n\n@pytest.fixture(autouse=True)\ndef env(monkeypatch):\n    monkeypatch.setenv('X', '1')\n", True),
    ("def pytest_configure(config):\n    pass\n", True),
    ("pytest_plugins = ['helpers']\n", True),
    ("import lib\n\nlib.FACTOR = 3\n", True),
])
def test_a_conftest_that_acts_around_the_tests_keeps_them_in_process(tmp_path: Path, conftest: str, stays: bool):
    root, cand = _project(tmp_path, "from lib import double\n\n\ndef test_d():\n    assert double(2) == 4\n", conftest)
    cand.tests = ["tests/test_lib.py::test_d"]
    plan = harness_plan(root, cand, set(cand.tests), ["."])
    assert isinstance(plan, str) == stays, plan


def test_methods_and_test_classes_stay_in_process(tmp_path: Path):
    root, cand = _project(tmp_path, "from lib import double\n\n\nclass TestD:\n    def test_d(self):\n"
                                    "        assert double(2) == 4\n")
    cand.tests = ["tests/test_lib.py::TestD::test_d"]
    assert "method of a test class" in harness_plan(root, cand, set(cand.tests), ["."])
    method = Candidate(sites("lib.py", (root / "lib.py").read_text())[1], tests=["tests/test_lib.py::TestD::test_d"])
    assert "a method" in harness_plan(root, method, set(method.tests), ["."])


# --- the fixture project's isolated tasks, judged on the host ------------------------------------

# Wrong (the stub still raises) and forging from inside the module under test: patch pytest so every
# test passes, and write the reward file.
FORGE = """

try:
    import pytest

    pytest.Function.runtest = lambda self: None
except Exception:
    pass
try:
    with open({reward!r}, "w") as fh:
        fh.write("1")
except Exception:
    pass
"""


@pytest.fixture(scope="module")
def mined_isolated(tmp_path_factory):
    from swerl.tasks.mine.pipeline import prepare, write_tasks
    from tests.tasks.test_mine import FIXTURE, host_traces

    tmp = tmp_path_factory.mktemp("mined-isolated")
    prepared = prepare(FIXTURE, tmp / "work")
    _, entries = write_tasks(prepared, host_traces(prepared.root, tmp), tmp / "out")
    return {e.function: e for e in entries if e.status == "kept"}, tmp / "out"


def _judge(task: Path, module_text: str | None, work: Path, reward_text: str = "0\n") -> float:
    """Run the task's real runner on the host, /app mapped to ``work/app`` (``module_text``: the mined
    file's text, None for the stub); returns the reward it wrote."""
    app, tests, reward = work / "app", work / "tests", work / "reward.txt"
    shutil.copytree(task / "environment" / "app", app)
    shutil.copytree(task / "tests", tests)
    if module_text is not None:
        (app / "minilib" / "__init__.py").write_text(module_text)
    test_file = tests / TEST_FILE
    test_file.write_text(test_file.read_text().replace('"/app"', repr(str(app))).replace("'/app'", repr(str(app))))
    reward.write_text(reward_text)
    expected = re.search(r"--expect (\d+)", (tests / "test.sh").read_text()).group(1)
    subprocess.run([sys.executable, "-I", "-S", str(tests / "swerl_run_tests.py"), "--expect", expected, "--reward",
                    str(reward), "--tests-dir", str(tests), str(test_file)], cwd=work, capture_output=True, timeout=300)
    return float(reward.read_text())


def test_the_fixture_mines_isolated_tasks_for_its_plain_value_functions(mined_isolated):
    entries, out = mined_isolated
    assert {f for f, e in entries.items() if e.metadata["harness"] == "isolated"} == {"slugify", "parse_ratio"}
    assert "test_add_strings" in entries["add"].metadata["in_process_because"]
    task = out / entries["parse_ratio"].task
    assert sorted(p.name for p in (task / "tests").iterdir()) == sorted(
        ["pytest.ini", "swerl_run_tests.py", "swerl_solution_proxy.py", "test.sh", TEST_FILE])
    assert "--expect 3 " in (task / "tests" / "test.sh").read_text()
    assert "pythonpath" not in (task / "tests" / "pytest.ini").read_text()
    instruction = (task / "instruction.md").read_text()
    assert all(f"`{t}`" in instruction for t in entries["parse_ratio"].tests) and "separate process" in instruction


@pytest.mark.skipif(_landlock_abi() < 1, reason="this kernel has no Landlock")
@pytest.mark.parametrize("function", ["parse_ratio", "slugify"])
def test_isolated_oracle_scores_one_stub_zero_and_a_pytest_patch_zero(mined_isolated, tmp_path: Path, function: str):
    """parse_ratio's oracle raises its own RatioError (a ValueError): `pytest.raises(ValueError)`
    accepts it through the builtin base the worker relays."""
    entries, out = mined_isolated
    task = out / entries[function].task
    oracle = (task / "solution" / "__init__.py").read_text()
    stub = (task / "environment" / "app" / "minilib" / "__init__.py").read_text()
    assert _judge(task, oracle, tmp_path / "oracle") == 1.0
    assert _judge(task, None, tmp_path / "stub") == 0.0
    forge = tmp_path / "forge"
    assert _judge(task, stub + FORGE.format(reward=str(forge / "reward.txt")), forge) == 0.0


@pytest.mark.skipif(_landlock_abi() < 1, reason="this kernel has no Landlock")
def test_the_worker_imports_a_dotted_module_from_the_given_roots(tmp_path: Path):
    from swerl.tasks.harness.swerl_solution_proxy import SolutionError, close_workers, solution_function

    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "src" / "pkg" / "maths.py").write_text(
        "class Zero(ZeroDivisionError):\n    pass\n\n\ndef ratio(a, b):\n    if not b:\n        raise Zero()\n"
        "    return a / b\n")
    ratio = solution_function("ratio", str(tmp_path), "pkg.maths", [str(tmp_path / "src")])
    try:
        assert ratio(1, 4) == 0.25
        with pytest.raises(SolutionError) as info:
            ratio(1, 0)
        assert (info.value.exc_type, info.value.exc_base) == (None, "ZeroDivisionError")
        assert "pkg" not in sys.modules
    finally:
        close_workers()
