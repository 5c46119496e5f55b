"""swerl.tasks.pytask and the fixture tasks it wrote: real verifier runs without Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from swerl.tasks import load_task
from swerl.tasks.pytask import PyTaskSpec, count_tests, write_pytask

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


@pytest.mark.parametrize("name", ["add-two", "count-vowels", "reverse-words"])
def test_fixture_oracle_scores_one_and_null_scores_zero(host_verifier, name: str):
    task = load_task(FIXTURES / name)
    assert host_verifier(task.path, (task.solution_dir / "solution.py").read_text()) == 1.0
    assert host_verifier(task.path, None) == 0.0


def test_wrong_solution_scores_zero(host_verifier):
    assert host_verifier(FIXTURES / "add-two", "def add_two(x):\n    return x + 3\n") == 0.0


def test_test_code_without_tests_is_refused(tmp_path: Path):
    spec = PyTaskSpec(name="empty", instruction="Nothing.", entry_point="f", solution_code="def f():\n    pass\n",
                      test_code="# no tests here\n", title="empty")
    with pytest.raises(ValueError, match="holds no test"):
        write_pytask(spec, tmp_path / "empty")


def test_tests_are_counted_as_pytest_collects_them():
    code = ("import unittest\n\ndef test_a():\n    pass\n\ndef helper():\n    pass\n\n"
            "class TestB:\n    def test_b1(self):\n        pass\n    def test_b2(self):\n        pass\n\n"
            "class Cases(unittest.TestCase):\n    def test_c(self):\n        pass\n    def setUp(self):\n        pass\n")
    assert count_tests(code) == 4
    with pytest.raises(ValueError, match="num_tests"):
        count_tests("import pytest\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_x(x):\n    pass\n")


def _spec(**kwargs) -> PyTaskSpec:
    return PyTaskSpec(name="add", instruction="Write add(a, b).", entry_point="add",
                      solution_code="def add(a, b):\n    return a + b\n", title="add",
                      test_code="def test_add():\n    assert add(2, 3) == 5\n\ndef test_zero():\n    assert add(0, 0) == 0\n",
                      **kwargs)


@pytest.mark.parametrize("isolate", [False, True])
def test_hardened_verifier_scores_oracle_one_and_wrong_or_missing_zero(harness_verifier, tmp_path: Path, isolate):
    task_dir = write_pytask(_spec(isolate_solution=isolate), tmp_path / "add")
    assert "--expect 2" in (task_dir / "tests" / "test.sh").read_text()
    assert harness_verifier(task_dir, "def add(a, b):\n    return a + b\n") == 1.0
    assert harness_verifier(task_dir, "def add(a, b):\n    return a - b\n") == 0.0
    assert harness_verifier(task_dir, None) == 0.0


def test_fewer_tests_than_expected_score_zero(harness_verifier, tmp_path: Path):
    task_dir = write_pytask(_spec(num_tests=3), tmp_path / "add")  # the file holds 2
    assert harness_verifier(task_dir, "def add(a, b):\n    return a + b\n") == 0.0


@pytest.mark.parametrize("payload", ["EXIT0_AT_IMPORT", "SYS_EXIT_AT_IMPORT", "SKIP_AT_IMPORT", "EXIT0_AT_EXIT"])
def test_in_process_exits_and_skips_score_zero_without_isolation(harness_verifier, tmp_path: Path, payload):
    from swerl.sandbox import redteam_payloads

    task_dir = write_pytask(_spec(), tmp_path / "add")  # the solution runs inside the pytest process
    assert harness_verifier(task_dir, getattr(redteam_payloads, payload)) == 0.0


def test_planted_config_and_shadow_modules_in_app_are_not_read(harness_verifier, tmp_path: Path):
    from swerl.sandbox import redteam_payloads as p

    task_dir = write_pytask(_spec(), tmp_path / "add")
    wrong = "def add(a, b):\n    return 0\n"
    planted = {"solution.py": wrong, "pytest.ini": p.PYTEST_INI_COLLECT_ONLY, "conftest.py": p.CONFTEST_ALL_PASS,
               "pytest.py": p.EXIT0_AT_IMPORT, "json.py": p.EXIT0_AT_IMPORT, "re.py": p.EXIT0_AT_IMPORT}
    assert harness_verifier(task_dir, planted) == 0.0
    assert harness_verifier(task_dir, {**planted, "solution.py": "def add(a, b):\n    return a + b\n"}) == 1.0


def test_written_task_loads_with_executable_scripts(tmp_path: Path):
    spec = PyTaskSpec(name="t", instruction="Do f.", entry_point="f", solution_code="def f():\n    return 1\n",
                      test_code="def test_f():\n    assert f() == 1\n", title="t",
                      metadata={"source": "unit \"test\""}, verifier_timeout_s=30.0)
    task = load_task(write_pytask(spec, tmp_path / "t"))
    assert task.config.metadata == {"source": 'unit "test"'}
    assert task.config.verifier.timeout_sec == 30.0
    assert task.test_script.stat().st_mode & 0o111 and (task.solution_dir / "solve.sh").stat().st_mode & 0o111
    with pytest.raises(FileExistsError):
        write_pytask(spec, tmp_path / "t")
