"""Bad input on any command: one `error:` line on stderr, exit 2 (3 for the environment), nothing
on stdout and no file written (the commands run in an empty folder that must stay empty)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "tests" / "fixtures" / "tasks")
DEMO_YAML = str(ROOT / "examples" / "humaneval-smollm2-cpu.yaml")

CASES = [
    (["eval", "/nowhere", "-o", "out"], 2, "/nowhere: no such file or folder"),
    (["eval", TASKS, "--model", "/nowhere", "-o", "out"], 2, "model '/nowhere' not found"),
    (["eval", TASKS, "--engine", "bogus://x", "-o", "out"], 2, "--engine: "),
    (["eval", TASKS, "--step", "3", "-o", "out"], 2, "--step needs --from-run"),
    (["sandbox-test", "/nowhere"], 2, "/nowhere: no such file or folder"),
    (["sandbox", "gc", "--engine", "unix:///nowhere/docker.sock"], 3, "Docker is not reachable"),
    (["train", DEMO_YAML, "-o", "run"], 2, "run: swerl tasks import humaneval runs/humaneval-tasks"),
    (["tasks", "import", "humaneval", "he", "--limit", "0"], 2, "'--limit'"),
]


@pytest.mark.parametrize("argv, code, words", CASES, ids=[f"{c[0][0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_and_writes_nothing(argv, code, words, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", *argv], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == code and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("error: ") and words in lines[0] and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []
