"""swerl.tasks.harness: the verifier files of generated tasks, run for real on the host
(real pytest, real worker processes, real Landlock where the kernel has it)."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest

from swerl.sandbox import redteam_payloads as p
from swerl.tasks import import_humaneval
from swerl.tasks.harness.swerl_run_tests import judge_report
from swerl.tasks.harness.swerl_solution_proxy import decode, encode


def _junit(cases: str, errors: int = 0, failures: int = 0, skipped: int = 0) -> bytes:
    n = cases.count("<testcase")
    return (f'<?xml version="1.0"?><testsuites><testsuite name="pytest" errors="{errors}" failures="{failures}" '
            f'skipped="{skipped}" tests="{n}">{cases}</testsuite></testsuites>').encode()


PASS = '<testcase classname="test_solution" name="test_f"/>'


@pytest.mark.parametrize(("report", "exit_code", "reward"), [
    (_junit(PASS), 0, 1.0),
    (_junit(PASS), 1, 0.0),  # the runner failed even though the report looks fine
    (_junit(PASS + PASS), 0, 0.0),  # more tests than expected
    (_junit(""), 0, 0.0),
    (_junit('<testcase name="t"><skipped type="pytest.skip" message="x"/></testcase>', skipped=1), 0, 0.0),
    (_junit('<testcase name="t"><skipped type="pytest.xfail" message="x"/></testcase>', skipped=1), 0, 0.0),
    (_junit('<testcase name="t"><failure message="x"/></testcase>', failures=1), 0, 0.0),
    (_junit(PASS, errors=1), 0, 0.0),  # a collection error shows only in the suite's attributes
    (b"", 0, 0.0),  # pytest died before reporting (os._exit in the solution)
    (b"<testsuites><testsuite", 0, 0.0),
])
def test_reward_needs_every_expected_test_passed_and_exit_zero(report: bytes, exit_code: int, reward: float):
    assert judge_report(report, exit_code, expected=1)[0] == reward


def test_codec_round_trips_plain_values_with_exact_types():
    value = [None, True, 1, 2.5, float("inf"), "s", b"\x00", (1, [2]), {1: {"a": frozenset({3})}}, {4, 5}, 1j]
    back = decode(encode(value))
    assert back == value
    assert [type(v) for v in back] == [type(v) for v in value]
    assert type(decode(encode(True))) is bool and type(decode(encode(1))) is int


class _AlwaysEqual:
    def __eq__(self, other):
        return True


class _EqStr(str):
    def __eq__(self, other):
        return True


@pytest.mark.parametrize("value", [_AlwaysEqual(), _EqStr("x"), [1, _EqStr("x")], (i for i in range(2)), {1: object()}])
def test_codec_refuses_anything_but_plain_builtins(value):
    with pytest.raises(TypeError, match="not a plain builtin value"):
        encode(value)


@pytest.mark.parametrize("tree", [{"x": []}, {"l": [], "t": []}, {"d": [[1]]}, {"c": ["1", 2.0]}, [1, 2]])
def test_decode_refuses_malformed_trees(tree):
    with pytest.raises(ValueError, match="malformed"):
        decode(tree)


@pytest.fixture(scope="module")
def humaneval_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_humaneval(tmp_path_factory.mktemp("he"), limit=1)[0]  # has_close_elements


@pytest.mark.parametrize("payload", [
    "EXIT0_AT_IMPORT", "SYS_EXIT_AT_IMPORT", "SKIP_AT_IMPORT", "EXIT0_AT_EXIT", "ALWAYS_EQUAL", "EQ_SUBCLASSES",
    "PATCH_PYTEST", "FORGE_JUNIT", "KILL_VERIFIER",
])
def test_in_process_exploits_score_zero_on_a_humaneval_task(harness_verifier, humaneval_task: Path, payload):
    assert harness_verifier(humaneval_task, getattr(p, payload)) == 0.0


def test_the_oracle_still_scores_one_through_the_worker(harness_verifier, humaneval_task: Path):
    assert harness_verifier(humaneval_task, (humaneval_task / "solution" / "solution.py").read_text()) == 1.0


def _landlock_abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))


@pytest.mark.skipif(_landlock_abi() < 1, reason="this kernel has no Landlock")
@pytest.mark.parametrize("action", ["read", "write"])
def test_the_worker_can_neither_read_nor_write_outside_its_folders(harness_verifier, humaneval_task: Path,
                                                                   tmp_path: Path, action: str):
    # A correct solution that first reads a file beside the tests (as it would /tests) or
    # writes one (as it would /logs/verifier/reward.txt): confined, that step fails, so does the test.
    secret, marker = tmp_path / "secret.txt", tmp_path / "marker.txt"
    secret.write_text("expected outputs")
    step = f"open({str(secret)!r}).read()" if action == "read" else f"open({str(marker)!r}, 'w').write('1')"
    oracle = (humaneval_task / "solution" / "solution.py").read_text()
    spy = oracle.replace("def has_close_elements(", "def _real(", 1) + (
        f"def has_close_elements(*args):\n    {step}\n    return _real(*args)\n")
    assert harness_verifier(humaneval_task, spy) == 0.0
    assert not marker.exists()


def test_without_landlock_the_solution_is_never_run_unconfined(humaneval_task: Path, tmp_path: Path):
    """A forced probe (the proxy's ``landlock_abi`` answers 0, as under gVisor's runsc): the runner
    writes no reward (the file left empty, exit 3, its last line says why) instead of running the
    oracle, or ``read-hidden-tests``, unconfined; the worker itself refuses to import a solution it
    could not confine. Under runsc ``read-hidden-tests`` forged reward 1 before this rule."""
    import re
    import subprocess
    import sys

    for name, solution in (("oracle", (humaneval_task / "solution" / "solution.py").read_text()),
                           ("read-hidden-tests", p.READ_HIDDEN_TESTS)):
        work = tmp_path / name
        tests, app = work / "tests", work / "app"
        shutil.copytree(humaneval_task / "tests", tests)
        app.mkdir()
        (app / "solution.py").write_text(solution)
        proxy = tests / "swerl_solution_proxy.py"
        proxy.write_text(proxy.read_text().replace("def landlock_abi() -> int:\n", "def landlock_abi() -> int:\n    return 0\n"))
        test_file = tests / "test_solution.py"
        test_file.write_text(test_file.read_text().replace('"/app"', repr(str(app))))
        expected = re.search(r"--expect (\d+)", (tests / "test.sh").read_text()).group(1)
        reward = work / "reward.txt"
        reward.write_text("0\n")
        proc = subprocess.run([sys.executable, "-I", "-S", str(tests / "swerl_run_tests.py"), "--expect", expected,
                               "--reward", str(reward), str(test_file)], cwd=work, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 3 and reward.read_text() == "", (name, proc.stdout, proc.stderr)
        assert "Landlock is unavailable here" in proc.stdout.strip().splitlines()[-1]


def _unchecked_pyc(source: str, folder: Path) -> bytes:
    """``source`` compiled to an unchecked hash-based pyc (PEP 552): imported without its source being read."""
    import py_compile

    src, out = folder / "payload.py", folder / "payload.pyc"
    src.write_text(source)
    py_compile.compile(str(src), cfile=str(out), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return out.read_bytes()


@pytest.fixture(scope="module")
def in_process_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A task whose tests import the solution in the judging process (``isolate_solution=False``)."""
    from swerl.tasks.pytask import PyTaskSpec, write_pytask

    spec = PyTaskSpec(name="add", instruction="Write add(a, b).", entry_point="add", title="add",
                      solution_code="def add(a, b):\n    return a + b\n",
                      test_code="def test_add():\n    assert add(2, 3) == 5\n")
    return write_pytask(spec, tmp_path_factory.mktemp("inproc") / "add")


@pytest.mark.parametrize("isolated", [False, True])
def test_bytecode_in_app_is_never_imported(harness_verifier, in_process_task: Path, humaneval_task: Path,
                                           tmp_path: Path, isolated: bool):
    """A correct solution as an unchecked pyc beside a bland source, or as a sourceless
    ``solution.pyc``: the judge (and the isolated worker) compile the source or find no module."""
    import sys

    task = humaneval_task if isolated else in_process_task
    oracle = (task / "solution" / "solution.py").read_text()
    pyc = _unchecked_pyc(oracle, tmp_path)
    bland = "def add(a, b):\n    return 0\n" if not isolated else oracle.replace("return ", "return not ", 1)
    cached = f"__pycache__/solution.{sys.implementation.cache_tag}.pyc"
    assert harness_verifier(task, oracle) == 1.0
    assert harness_verifier(task, bland) == 0.0
    assert harness_verifier(task, {"solution.py": bland, cached: pyc}) == 0.0
    assert harness_verifier(task, {"solution.pyc": pyc}) == 0.0


CLASS_MODULE = '''\
class Box:
    def __init__(self, start=0):
        self.total = start

    def add(self, n):
        if n < 0:
            raise ValueError("negative")
        self.total += n
        return self.total

    def odd(self):
        class ValueError(Exception):  # named like a builtin, but is not one
            pass
        raise ValueError("fake")

    def thing(self):
        return object()
'''


@pytest.mark.skipif(_landlock_abi() < 1, reason="this kernel has no Landlock")
def test_class_instances_live_in_the_worker_and_only_plain_values_come_back(tmp_path: Path):
    import sys

    from swerl.tasks.harness.swerl_solution_proxy import SolutionError, close_workers, solution_class

    (tmp_path / "boxmod.py").write_text(CLASS_MODULE)
    Box = solution_class("Box", str(tmp_path), module="boxmod")
    try:
        a, b = Box(), Box(10)
        assert (a.add(2), a.add(3), b.add(1)) == (2, 5, 11)  # state kept per instance, in the worker
        with pytest.raises(SolutionError) as raised:
            a.add(-1)
        assert raised.value.exc_type == "ValueError"
        with pytest.raises(SolutionError) as fake:
            a.odd()
        assert fake.value.exc_type is None  # a class merely named ValueError is not the builtin
        with pytest.raises(SolutionError, match="not a plain builtin value"):
            a.thing()
        assert a.add(0) == 5
        assert "boxmod" not in sys.modules  # the judge never imported the solution
    finally:
        close_workers()


@pytest.fixture(scope="module")
def class_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from swerl.tasks.generate import BY_NAME
    from swerl.tasks.generate.write import task_spec
    from swerl.tasks.pytask import write_pytask

    spec = task_spec("pm-t3-classes-account-withdraw-0000", BY_NAME["account-withdraw"], 0, {})
    return write_pytask(spec, tmp_path_factory.mktemp("gen") / spec.name)


@pytest.mark.parametrize("payload", ["EXIT0_AT_IMPORT", "ALWAYS_EQUAL", "EQ_SUBCLASSES", "PATCH_PYTEST", "FORGE_JUNIT",
                                     "WRONG_ANSWERS_PY"])
def test_in_process_exploits_score_zero_on_a_generated_class_task(harness_verifier, class_task: Path, payload):
    assert harness_verifier(class_task, getattr(p, payload)) == 0.0


def test_a_generated_class_task_scores_its_oracle_one_and_its_stub_zero(harness_verifier, class_task: Path):
    assert harness_verifier(class_task, (class_task / "solution" / "solution.py").read_text()) == 1.0
    assert harness_verifier(class_task, (class_task / "environment" / "solution.py").read_text()) == 0.0


def test_a_worker_sees_neither_the_hidden_tests_nor_pytest_output_growing(humaneval_task: Path, tmp_path: Path):
    """Red-team finding: Landlock does not stop ``stat``, and a worker forged reward 1 on isolated
    tasks from the size of the hidden test file (the lengths of the expected literals) and of
    ``test-stdout.txt`` growing as ``pytest -v`` wrote each parametrized id. Now the collected test
    files are gone before the first call and pytest's output reaches the runner's stdout only
    after the tests. The solution below answers right only when it sees neither; before, it saw both."""
    import re
    import subprocess
    import sys

    work = tmp_path / "work"
    tests, app = work / "tests", work / "app"
    shutil.copytree(humaneval_task / "tests", tests)
    app.mkdir()
    test_file, stdout_file = tests / "test_solution.py", work / "test-stdout.txt"
    oracle = (humaneval_task / "solution" / "solution.py").read_text()
    (app / "solution.py").write_text(oracle.replace("def has_close_elements(", "def _real(", 1) + (
        "import os\n"
        "def has_close_elements(*args):\n"
        f"    if os.path.exists({str(test_file)!r}) or os.stat({str(stdout_file)!r}).st_size:\n"
        "        return 'leak seen'\n"
        "    return _real(*args)\n"))
    test_file.write_text(test_file.read_text().replace('"/app"', repr(str(app))))
    expected = re.search(r"--expect (\d+)", (tests / "test.sh").read_text()).group(1)
    reward = work / "reward.txt"
    reward.write_text("0\n")
    with stdout_file.open("w") as out:
        subprocess.run([sys.executable, "-I", "-S", str(tests / "swerl_run_tests.py"), "--expect", expected,
                        "--reward", str(reward), str(test_file)], cwd=work, stdout=out, stderr=subprocess.STDOUT,
                       timeout=120)
    log = stdout_file.read_text()
    assert reward.read_text() == "1\n", log[-3000:]
    assert f"{expected} passed" in log and log.strip().splitlines()[-1].startswith("swerl_run_tests: ")
    assert not test_file.exists()  # deleted after collection (the trial's container is thrown away)
