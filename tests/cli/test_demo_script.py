"""examples/demo.sh (what `make demo` runs): a failed step is named with its exit code on stderr and
stays a failure; a run whose steps all pass ends with the "demo finished" line. A stand-in `swerl`
(SWERL=...) records the steps and fails the one named in FAIL_STEP."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_SWERL = """#!/usr/bin/env bash
echo "$1" >> "$STEPS_LOG"
echo "$*" >> "$STEPS_LOG.args"
if [ "$1" = "$FAIL_STEP" ]; then echo "fake $1 failing" >&2; exit 1; fi
"""


def _demo(tmp_path: Path, fail_step: str) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "swerl"
    fake.write_text(FAKE_SWERL)
    fake.chmod(0o755)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "manifest.json").write_text("{}")  # the generate step is skipped
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


def test_the_sandbox_test_covers_the_tasks_the_demo_trains_on_not_the_whole_set(tmp_path):
    done = _demo(tmp_path, fail_step="none")
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "steps.log.args").read_text().splitlines()
    tested = next(c for c in calls if c.startswith("sandbox-test"))
    trained = next(c for c in calls if c.startswith("train"))
    # The same config and overrides as the train step: its data (and eval) sections pick the tasks.
    assert tested.startswith("sandbox-test --config examples/pymethods-smollm2-cpu.yaml --set data.tasks=")
    assert trained.startswith("train examples/pymethods-smollm2-cpu.yaml")
    assert f"--set data.tasks={tmp_path / 'tasks' / 'train'}" in tested


@pytest.mark.docker
def test_sandbox_test_of_a_config_runs_the_tasks_it_trains_and_evaluates_on(tmp_path):
    import json
    import sys

    learning = ROOT / "examples" / "learning_tasks"
    argv = [sys.executable, "-m", "swerl.cli", "sandbox-test", "--config", str(ROOT / "examples" / "humaneval-smollm2-cpu.yaml"),
            "--set", f"data.tasks={learning}", "--set", "data.names=[magic-a]",
            "--set", f"eval={{tasks: {learning}, names: [magic-c, magic-a]}}", "--json", str(tmp_path / "t.json")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "t.json").read_text())
    assert sorted({r["task"] for r in rows}) == ["magic-a", "magic-c"]  # not magic-b, magic-d; magic-a once
    assert len(rows) == 4  # an oracle and a null attempt each


def test_the_demo_config_trains_the_generated_family_with_a_signal_every_step():
    """The demo's config reads the folder demo.sh generates, drops groups without signal (dynamic
    sampling) and commits every step (an interrupted demo loses no step)."""
    from swerl.trainer.config import load_train_config

    cfg = load_train_config(ROOT / "examples" / "pymethods-smollm2-cpu.yaml")
    script = (ROOT / "examples" / "demo.sh").read_text()
    assert cfg.data.tasks == "runs/pymethods-demo/train" and "TASKS=${TASKS:-runs/pymethods-demo}" in script
    assert "tasks generate pymethods" in script and 'data.tasks=$TASKS/train' in script
    assert cfg.algorithm.dynamic_sampling.enabled and cfg.algorithm.use_tis
    assert cfg.checkpointing.ckpt_interval == 1 and cfg.checkpointing.hf_save_interval == 1
    assert cfg.loop.max_staleness_steps == 1 and cfg.loop.exact_staleness  # rollouts overlap the update, repeatably
