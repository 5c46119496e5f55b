"""swerl.tasks.load: task folders, folders of tasks, and every malformed-folder case."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from swerl.errors import TaskError
from swerl.tasks import MalformedTask, TaskProblem, load_task, load_tasks

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    """A fresh writable copy of the add-two fixture task."""
    return Path(shutil.copytree(FIXTURES / "add-two", tmp_path / "add-two"))


def test_fixture_tasks_load_in_name_order_with_their_config():
    tasks = load_tasks(FIXTURES)
    assert tasks.names == ["add-two", "count-vowels", "reverse-words"]
    assert tasks.problems == ()
    add_two = tasks.by_name("add-two")
    assert add_two.config.verifier.timeout_sec == 60.0
    assert add_two.config.environment.memory_mb == 512
    assert add_two.config.environment.allow_internet is False
    assert add_two.config.metadata["entry_point"] == "add_two"
    assert "add_two" in add_two.instruction
    assert add_two.solution_dir == add_two.path / "solution"
    assert add_two.dockerfile.read_text().startswith("FROM python:3.10-slim")
    assert add_two.test_script.is_file()


def test_single_task_folder_is_one_task(task_dir: Path):
    tasks = load_tasks(task_dir)
    assert tasks.names == ["add-two"]
    assert tasks[0].path == task_dir.resolve()


def test_limit_stops_after_n_valid_tasks():
    assert load_tasks(FIXTURES, limit=2).names == ["add-two", "count-vowels"]


def test_names_keep_matching_tasks_before_the_limit():
    assert load_tasks(FIXTURES, names=["reverse-*", "add-two"]).names == ["add-two", "reverse-words"]
    assert load_tasks(FIXTURES, names=["*-*"], limit=1).names == ["add-two"]


def test_names_matching_nothing_is_a_clear_error():
    with pytest.raises(TaskError, match="no task name matches"):
        load_tasks(FIXTURES, names=["nope-*"])


def test_defaults_apply_for_an_empty_task_toml(task_dir: Path):
    (task_dir / "task.toml").write_text("")
    task = load_task(task_dir)
    assert task.config.agent.timeout_sec == 600.0
    assert task.config.verifier.timeout_sec == 600.0
    assert task.config.environment.cpus == 1.0
    assert task.config.environment.storage_mb == 10240


def test_missing_instruction_names_the_file(task_dir: Path):
    (task_dir / "instruction.md").unlink()
    with pytest.raises(MalformedTask, match="instruction.md") as info:
        load_task(task_dir)
    assert info.value.file.endswith("instruction.md")
    assert info.value.exit_code == 2


def test_bad_toml_reports_line(task_dir: Path):
    (task_dir / "task.toml").write_text('version = "1.0"\n[agent\ntimeout_sec = 5\n')
    with pytest.raises(MalformedTask, match=r"bad TOML: .*line 2") as info:
        load_task(task_dir)
    assert info.value.file.endswith("task.toml")


def test_wrong_type_names_the_field(task_dir: Path):
    (task_dir / "task.toml").write_text('[agent]\ntimeout_sec = "soon"\n')
    with pytest.raises(MalformedTask, match=r"field 'agent.timeout_sec'.*'soon'"):
        load_task(task_dir)


def test_negative_memory_is_rejected(task_dir: Path):
    (task_dir / "task.toml").write_text("[environment]\nmemory_mb = -5\n")
    with pytest.raises(MalformedTask, match="environment.memory_mb"):
        load_task(task_dir)


def test_compose_environment_is_not_supported_yet(task_dir: Path):
    (task_dir / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    with pytest.raises(MalformedTask, match="not supported yet") as info:
        load_task(task_dir)
    assert info.value.file.endswith("docker-compose.yaml")


def test_missing_dockerfile(task_dir: Path):
    (task_dir / "environment" / "Dockerfile").unlink()
    with pytest.raises(MalformedTask, match="missing environment/Dockerfile"):
        load_task(task_dir)


def test_prebuilt_image_needs_no_dockerfile(task_dir: Path):
    (task_dir / "environment" / "Dockerfile").unlink()
    (task_dir / "task.toml").write_text('[environment]\ndocker_image = "python:3.10-slim"\n')
    task = load_task(task_dir)
    assert task.dockerfile is None
    assert task.config.environment.docker_image == "python:3.10-slim"


def test_missing_test_sh(task_dir: Path):
    (task_dir / "tests" / "test.sh").unlink()
    with pytest.raises(MalformedTask, match="missing tests/test.sh"):
        load_task(task_dir)


def test_symlink_escaping_the_folder_is_rejected(task_dir: Path, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host data")
    (task_dir / "tests" / "data.txt").symlink_to(secret)
    with pytest.raises(MalformedTask, match="symlink points outside"):
        load_task(task_dir)


def test_symlink_inside_the_folder_is_fine(task_dir: Path):
    (task_dir / "tests" / "copy.py").symlink_to(task_dir / "tests" / "test_solution.py")
    assert load_task(task_dir).name == "add-two"


def test_unknown_keys_are_kept_and_warned_once(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    for name in ("a", "b"):
        shutil.copytree(FIXTURES / "add-two", tmp_path / name)
        (tmp_path / name / "task.toml").write_text(
            '[agent]\ntimeout_sec = 30\nzz_loader_test_key = 1\n[zz_loader_test_table]\nx = "y"\n')
    with caplog.at_level(logging.WARNING, logger="swerl.tasks.load"):
        tasks = load_tasks(tmp_path)
    assert tasks[0].config.agent.model_extra == {"zz_loader_test_key": 1}
    assert tasks[1].config.model_extra == {"zz_loader_test_table": {"x": "y"}}
    warned = [r.getMessage() for r in caplog.records if "zz_loader_test" in r.getMessage()]
    assert len(warned) == 2
    assert any("'agent.zz_loader_test_key'" in m for m in warned)
    assert any("'zz_loader_test_table'" in m for m in warned)


def test_skip_reports_malformed_tasks_and_keeps_the_rest(tmp_path: Path):
    for name in ("a-good", "b-no-instruction", "c-bad-toml", "d-good"):
        shutil.copytree(FIXTURES / "add-two", tmp_path / name)
    (tmp_path / "b-no-instruction" / "instruction.md").unlink()
    (tmp_path / "c-bad-toml" / "task.toml").write_text("[agent]\ntimeout_sec = = 3\n")
    tasks = load_tasks(tmp_path, on_error="skip")
    assert tasks.names == ["a-good", "d-good"]
    assert [Path(p.path).parent.name for p in tasks.problems] == ["b-no-instruction", "c-bad-toml"]
    assert all(isinstance(p, TaskProblem) for p in tasks.problems)
    path, reason = tasks.problems[1]
    assert path.endswith("task.toml") and "bad TOML" in reason


def test_raise_mode_stops_at_the_first_malformed_task(tmp_path: Path):
    shutil.copytree(FIXTURES / "add-two", tmp_path / "a")
    shutil.copytree(FIXTURES / "add-two", tmp_path / "b")
    (tmp_path / "a" / "tests" / "test.sh").unlink()
    with pytest.raises(MalformedTask, match="test.sh"):
        load_tasks(tmp_path)


def test_missing_source_is_a_task_error(tmp_path: Path):
    with pytest.raises(TaskError, match="no such file"):
        load_tasks(tmp_path / "nowhere", on_error="skip")


def test_folder_without_tasks_is_a_task_error(tmp_path: Path):
    (tmp_path / ".hidden").mkdir()
    with pytest.raises(TaskError, match="holds no task"):
        load_tasks(tmp_path, on_error="skip")


def test_unknown_file_format_is_a_task_error(tmp_path: Path):
    (tmp_path / "tasks.csv").write_text("path,task_binary\n")
    with pytest.raises(TaskError, match="parquet/.jsonl"):
        load_tasks(tmp_path / "tasks.csv")


def test_a_folder_of_task_sets_names_them_instead_of_reporting_each_as_malformed(tmp_path: Path):
    """A generated family's root (train/, heldout-*/ of task folders) is not a task set itself."""
    for split in ("train", "heldout-instance"):
        shutil.copytree(FIXTURES / "add-two", tmp_path / "family" / split / "add-two")
    with pytest.raises(TaskError, match=r"family: holds task sets, not tasks \(heldout-instance, train\): pass one of"):
        load_tasks(tmp_path / "family", on_error="skip")
    assert [t.name for t in load_tasks(tmp_path / "family" / "train").tasks] == ["add-two"]
