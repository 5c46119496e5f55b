"""swerl.tasks.pytask and the fixture tasks it wrote: real verifier runs without Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from swerl.tasks import load_task
from swerl.tasks.pytask import PyTaskSpec, write_pytask

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


@pytest.mark.parametrize("name", ["add-two", "count-vowels", "reverse-words"])
def test_fixture_oracle_scores_one_and_null_scores_zero(host_verifier, name: str):
    task = load_task(FIXTURES / name)
    assert host_verifier(task.path, (task.solution_dir / "solution.py").read_text()) == 1.0
    assert host_verifier(task.path, None) == 0.0


def test_wrong_solution_scores_zero(host_verifier):
    assert host_verifier(FIXTURES / "add-two", "def add_two(x):\n    return x + 3\n") == 0.0


def test_test_file_that_collects_nothing_scores_zero(host_verifier, tmp_path: Path):
    spec = PyTaskSpec(name="empty", instruction="Nothing.", entry_point="f", solution_code="def f():\n    pass\n",
                      test_code="# no tests here\n", title="empty")
    task_dir = write_pytask(spec, tmp_path / "empty")
    assert host_verifier(task_dir, spec.solution_code) == 0.0  # pytest exit 5


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
