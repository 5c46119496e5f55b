"""Every output path a command writes (a file: `report --out`, `view --out`, `tasks health --patch`;
a folder: `train -o`, `eval --out`, `tasks import humaneval OUT_DIR`, `--cache-dir`) is checked when
the command line is parsed: where nothing can be created (/proc), under an existing file, or of the
wrong kind, the command stops before any work with one `error:` line naming the flag, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
ARM = sorted((ROOT / "tests" / "report" / "fixtures").glob("arm-*"))[0]

# (case, argv before the path, the flag, argv after the path, kind of output). Real inputs: the
# check must come before the work they would start (a report, a model load, the train preflight).
COMMANDS = [
    ("report", ["report", str(ARM), "--out"], "--out", [], "file"),
    ("view", ["view", str(ARM), "--out"], "--out", [], "file"),
    ("tasks-health", ["tasks", "health", str(ARM), "--patch"], "--patch", [], "file"),
    ("tasks-import", ["tasks", "import", "humaneval"], "out_dir", ["--limit", "1"], "folder"),
    ("tasks-list-cache", ["tasks", "list", str(FIXTURE_TASKS), "--cache-dir"], "--cache-dir", [], "folder"),
    ("eval", ["eval", str(FIXTURE_TASKS), "--limit", "1", "--out"], "--out", [], "folder"),
    ("train-dry-run", ["train", str(DEMO_YAML), "--dry-run", "-o"], "--out", [], "folder"),
]


def _bad_path(where: str, kind: str, tmp: Path) -> Path:
    """An output path the command cannot write: in /proc, under an existing file, or of the wrong
    kind (an existing folder for a file, an existing file for a folder)."""
    name = "out.html" if kind == "file" else "out"
    if where == "proc":
        return Path("/proc") / name
    afile = tmp / "a-file"
    afile.write_text("not a folder\n")
    if where == "under-file":
        return afile / name
    return afile if kind == "folder" else tmp


@pytest.mark.parametrize("where", ["proc", "under-file", "wrong-kind"])
@pytest.mark.parametrize(("before", "flag", "after", "kind"),
                         [case[1:] for case in COMMANDS], ids=[case[0] for case in COMMANDS])
def test_an_output_path_that_cannot_be_written_fails_at_parse_time(before, flag, after, kind, where, tmp_path):
    bad = _bad_path(where, kind, tmp_path)
    before_files = sorted(tmp_path.rglob("*"))
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", *before, str(bad), *after],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert f"Invalid value for '{flag}'" in lines[0] and "pass another path" in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert sorted(tmp_path.rglob("*")) == before_files  # nothing written


def test_a_writable_output_path_still_passes(tmp_path):
    """The check refuses only what cannot be written: a report to a folder that does not exist yet."""
    out = tmp_path / "new" / "deeper" / "report.html"
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", "report", str(ARM), "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.is_file() and not list(out.parent.glob(".swerl-probe-*"))
