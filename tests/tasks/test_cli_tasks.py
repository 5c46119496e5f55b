"""`swerl tasks validate|list|import humaneval`: output and exit codes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.cli import app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"
SWERL = Path(sys.executable).parent / "swerl"
runner = CliRunner()


def test_validate_all_valid_exits_0():
    result = runner.invoke(app, ["tasks", "validate", str(FIXTURES)])
    assert result.exit_code == 0, result.output
    assert "3 valid, 0 malformed" in result.stdout


def test_validate_lists_every_malformed_task_and_exits_1(tmp_path: Path):
    shutil.copytree(FIXTURES, tmp_path / "set", ignore=shutil.ignore_patterns("conftest.py"))
    (tmp_path / "set" / "add-two" / "instruction.md").unlink()
    (tmp_path / "set" / "reverse-words" / "environment" / "compose.yaml").write_text("services: {}\n")
    proc = subprocess.run([str(SWERL), "tasks", "validate", str(tmp_path / "set")], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 1, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 2
    assert "set/add-two/instruction.md" in rows[0] and "missing instruction.md" in rows[0]
    assert "set/reverse-words/environment/compose.yaml" in rows[1] and "not supported yet" in rows[1]
    assert "1 valid, 2 malformed" in proc.stdout


def test_validate_missing_path_exits_2_with_one_line(tmp_path: Path):
    proc = subprocess.run([str(SWERL), "tasks", "validate", str(tmp_path / "nowhere")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "no such file or folder" in proc.stderr and "Traceback" not in proc.stderr


def test_validate_folder_without_tasks_exits_2(tmp_path: Path):
    proc = subprocess.run([str(SWERL), "tasks", "validate", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "holds no task" in proc.stderr


def test_list_shows_names_and_limits():
    result = runner.invoke(app, ["tasks", "list", str(FIXTURES)])
    assert result.exit_code == 0, result.output
    for name in ("add-two", "count-vowels", "reverse-words"):
        assert name in result.stdout


def test_import_humaneval_writes_and_refuses_to_overwrite(tmp_path: Path):
    out = tmp_path / "he"
    result = runner.invoke(app, ["tasks", "import", "humaneval", str(out), "--limit", "2"])
    assert result.exit_code == 0, result.output
    assert "wrote 2 HumanEval tasks" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["humaneval-000", "humaneval-001"]
    proc = subprocess.run([str(SWERL), "tasks", "import", "humaneval", str(out), "--limit", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--force" in proc.stderr
    forced = runner.invoke(app, ["tasks", "import", "humaneval", str(out), "--limit", "2", "--force"])
    assert forced.exit_code == 0, forced.output


HARBOR13 = FIXTURES.parent / "harbor13"


def test_validate_prints_each_fixtures_schema_and_the_keys_swerl_does_not_act_on():
    """One fixture per schema 1.3 feature: its version, where its tests run, and each key swerl
    does not act on with what it does instead; the multi-step one is malformed (one line)."""
    unsupported = {"newer-schema": ["environment.mcp_servers", "environment.skills_dir", "agent.user",
                                    "verifier.continuous", "not part of task.toml up to schema 1.3"]}
    for folder in sorted(HARBOR13.iterdir()):
        result = runner.invoke(app, ["tasks", "validate", str(folder)], env={"COLUMNS": "240"})
        out = " ".join(result.stdout.split())
        if folder.name == "multi-step":
            assert result.exit_code == 1 and "multi-step tasks ([[steps]]) are not supported" in out, out
            continue
        assert result.exit_code == 0, result.output
        version = "1.4" if folder.name == "newer-schema" else "1.3"
        assert f"schema {version}: 1 task ({folder.name})" in out and "verification auto: clean room" in out, out
        keys = unsupported.get(folder.name, [])
        assert ("keys swerl does not act on" in out) == bool(keys) and all(k in out for k in keys), out


def test_tasks_new_refuses_a_folder_that_exists_and_a_bad_name(tmp_path: Path):
    (tmp_path / "taken").mkdir()
    from swerl.errors import ConfigError  # exit 2 through swerl.cli.main

    result = runner.invoke(app, ["tasks", "new", str(tmp_path / "taken")])
    assert isinstance(result.exception, ConfigError) and "exists; pass a new folder name" in str(result.exception)
    result = runner.invoke(app, ["tasks", "new", str(tmp_path / "bad name!")])
    assert isinstance(result.exception, ConfigError) and "a task name is letters" in str(result.exception)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # nothing half-written


@pytest.mark.docker
def test_tasks_new_writes_a_task_that_validate_and_sandbox_test_accept(tmp_path: Path):
    import json

    task = tmp_path / "mine" / "count-vowels"
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", "tasks", "new", str(task)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"sandbox-test {task}" in proc.stdout  # says what to run next
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["count-vowels"]  # no temporary folder left
    validate = subprocess.run([sys.executable, "-m", "swerl.cli", "tasks", "validate", str(task)],
                              capture_output=True, text=True, timeout=120)
    assert validate.returncode == 0 and "1 valid, 0 malformed" in validate.stdout, validate.stdout + validate.stderr
    tested = subprocess.run([sys.executable, "-m", "swerl.cli", "sandbox-test", str(task), "--json", "-"],
                            capture_output=True, text=True, timeout=300)
    assert tested.returncode == 0, tested.stderr[-2000:]
    rewards = {row["attempt"]: row["reward"] for row in json.loads(tested.stdout)}
    assert rewards == {"oracle": 1.0, "null": 0.0}


@pytest.mark.parametrize("make", ["missing", "no-tests"])
def test_mine_a_bad_project_exits_2_with_one_line_and_writes_no_out_dir(tmp_path: Path, make: str):
    """Fails before: the error was right, but OUT_DIR was created before the project was read."""
    project = tmp_path / "project"
    if make == "no-tests":
        project.mkdir()
        (project / "lib.py").write_text("def f():\n    return 1\n")
    out = tmp_path / "out"
    proc = subprocess.run([str(SWERL), "tasks", "mine", str(project), str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()
