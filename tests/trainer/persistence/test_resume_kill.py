"""``kill -9`` of a real ``swerl train`` at every boundary of a step's commit, then
``--resume latest``: the run ends with the metrics, exports, selected checkpoint and rollouts of
an uninterrupted run. Also: a resume that trains nothing changes no file and still removes dead
runs' containers.

Each killed run is the real CLI in a subprocess (tiny model, the learning tasks in real
sandboxes) with one function wrapped so that it stops at the boundary; the test then sends
SIGKILL. One uninterrupted reference run is shared by every case.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from swerl.selection import select_checkpoint

from ..test_loop import tiny_config, without_timing

pytestmark = [pytest.mark.docker, pytest.mark.slow]

KILL_STEP = 2
# The child: wrap the function at the boundary so that it writes a marker file and waits for
# the test's SIGKILL, then run the real CLI. Boundaries, in commit order:
#   during_export      exports/.tmp-global_step_N complete, not yet renamed
#   after_export       export renamed, checkpoint not started
#   during_checkpoint  checkpoints/.tmp-global_step_N complete, not yet renamed (the commit point)
#   after_checkpoint   checkpoint committed, record not yet in metrics.jsonl
CHILD = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    point, step, marker = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])

    def stop_here():
        marker.write_text(point)
        time.sleep(600)

    from swerl.trainer.persistence import checkpoint as ckpt
    real_replace, real_save = os.replace, ckpt.save_checkpoint

    def replace(src, dst, *args, **kwargs):
        folder = {"during_export": "exports", "during_checkpoint": "checkpoints"}.get(point)
        if Path(src).name == f".tmp-global_step_{step}" and Path(src).parent.name == folder:
            stop_here()
        return real_replace(src, dst, *args, **kwargs)

    def save_checkpoint(run_dir, at_step, *args, **kwargs):
        if point == "after_export" and at_step == step:
            stop_here()
        out = real_save(run_dir, at_step, *args, **kwargs)
        if point == "after_checkpoint" and at_step == step:
            stop_here()
        return out

    os.replace, ckpt.save_checkpoint = replace, save_checkpoint
    sys.argv = ["swerl", *sys.argv[4:]]
    from swerl.cli import main
    main()
""")


def swerl_train(cfg_path: Path, run_dir: Path, *extra: str, kill_at: str = "none", timeout_s: float = 600) -> int:
    """Run ``swerl train`` in a child; with ``kill_at``, SIGKILL it at that boundary of step KILL_STEP."""
    marker = run_dir.parent / f"{run_dir.name}.killpoint"
    argv = [sys.executable, "-c", CHILD, kill_at, str(KILL_STEP), str(marker),
            "train", str(cfg_path), "--run-dir", str(run_dir), *extra]
    log = open(run_dir.parent / f"{run_dir.name}.log", "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if kill_at != "none" and marker.exists():
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                return -signal.SIGKILL
            time.sleep(0.05)
        assert proc.poll() is not None, f"swerl train did not finish in {timeout_s}s"
        assert kill_at == "none", f"the run ended (exit {proc.returncode}) before reaching {kill_at}"
        return proc.returncode
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def records(run_dir: Path) -> list[dict]:
    return [without_timing(json.loads(line)) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def exports(run_dir: Path) -> dict[str, str]:
    """``global_step_N/file`` -> sha256 of every exported file."""
    root = run_dir / "exports"
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def rollouts(run_dir: Path) -> dict[int, list[tuple]]:
    """Per step: (group, sample, weight_version, response ids) of every dumped trajectory."""
    out = {}
    for path in (run_dir / "trajectories").glob("step_*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        out[int(path.stem.split("_")[1])] = [(r["group_id"], r["sample_index"], r["weight_version"],
                                              r["response_ids"]) for r in rows]
    return out


def selection(run_dir: Path) -> tuple:
    sel = select_checkpoint(run_dir, span=2)
    assert sel.chosen is not None
    return sel.chosen.step, sel.chosen.ema, [(c.step, c.value, c.eligible) for c in sel.candidates]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dir) -> tuple[Path, Path]:
    """(config path, run dir) of one uninterrupted 3-step run."""
    root = tmp_path_factory.mktemp("reference")
    cfg_path = root / "cfg.yaml"
    cfg_path.write_text(tiny_config(tiny_model_dir).to_yaml())
    assert swerl_train(cfg_path, root / "run") == 0
    return cfg_path, root / "run"


@pytest.mark.parametrize("boundary", ["during_export", "after_export", "during_checkpoint", "after_checkpoint"])
def test_kill_9_at_a_commit_boundary_then_resume_equals_the_uninterrupted_run(boundary, reference, tmp_path):
    cfg_path, ref = reference
    run = tmp_path / "run"
    assert swerl_train(cfg_path, run, kill_at=boundary) == -signal.SIGKILL
    assert swerl_train(cfg_path, run, "--resume", "latest") == 0

    assert records(run) == records(ref)
    assert exports(run) == exports(ref)
    assert selection(run) == selection(ref)
    assert rollouts(run) == rollouts(ref)  # same samples, and the weight version continued (1, 2 after step 1, 2)
    assert [v for _, _, v, _ in rollouts(ref)[3]] == [2] * 8
    assert not list(run.glob("*/.tmp-*")), "a stale temporary folder survived the resume"


def test_a_resume_that_trains_nothing_changes_no_file_and_removes_dead_runs(reference, tmp_path):
    import docker

    from swerl.sandbox.docker_api import LABEL_PID, LABEL_RUN

    cfg_path, ref = reference
    run = tmp_path / "run"
    shutil.copytree(ref, run)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != "train.log"}  # the log records the resume
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    client = docker.from_env()
    leaked = client.containers.create(
        "python:3.11-slim", "true", labels={LABEL_RUN: "guards-test-dead-run", LABEL_PID: dead.stdout.strip()})
    try:
        assert swerl_train(cfg_path, run, "--resume", "latest", "--set", "loop.max_steps=2") == 0
        after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != "train.log"}
        assert after.keys() == before.keys() and after == before  # config.yaml, metrics.jsonl, ... untouched
        assert not client.containers.list(all=True, filters={"id": leaked.id})
    finally:
        with __import__("contextlib").suppress(docker.errors.NotFound):
            leaked.remove(force=True)
        client.close()
