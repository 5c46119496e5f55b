"""examples/demo.sh (what `make demo` runs): a failed step is named with its exit code on stderr and
stays a failure; a run whose steps all pass ends with the "demo finished" line. A stand-in `swerl`
(SWERL=...) records the steps and fails the one named in FAIL_STEP."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE_SWERL = """#!/usr/bin/env bash
echo "$1" >> "$STEPS_LOG"
if [ "$1" = "$FAIL_STEP" ]; then echo "fake $1 failing" >&2; exit 1; fi
"""


def _demo(tmp_path: Path, fail_step: str) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "swerl"
    fake.write_text(FAKE_SWERL)
    fake.chmod(0o755)
    (tmp_path / "tasks" / "humaneval-163").mkdir(parents=True)  # the import step is skipped
    env = {**os.environ, "SWERL": str(fake), "TASKS": str(tmp_path / "tasks"), "FAIL_STEP": fail_step,
           "STEPS_LOG": str(tmp_path / "steps.log")}
    env.pop("SKIP_SANDBOX_TEST", None)
    env.pop("DEMO_SET", None)
    return subprocess.run(["bash", str(ROOT / "examples" / "demo.sh"), str(tmp_path / "out")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)


def test_a_failed_select_checkpoint_is_named_with_its_exit_code(tmp_path):
    done = _demo(tmp_path, fail_step="select-checkpoint")
    assert done.returncode == 1
    assert "demo failed: step 'select-checkpoint' exited with code 1" in done.stderr
    assert "demo finished" not in done.stderr
    assert (tmp_path / "steps.log").read_text().split() == ["sandbox-test", "train", "select-checkpoint"]


def test_a_failed_train_stops_the_demo_before_selection(tmp_path):
    done = _demo(tmp_path, fail_step="train")
    assert done.returncode == 1 and "demo failed: step 'train' exited with code 1" in done.stderr
    assert (tmp_path / "steps.log").read_text().split() == ["sandbox-test", "train"]


def test_a_demo_whose_steps_pass_says_it_finished(tmp_path):
    done = _demo(tmp_path, fail_step="none")
    assert done.returncode == 0 and "demo finished in" in done.stderr and "demo failed" not in done.stderr
