"""``swerl eval`` stopped and continued: episodes are on disk as they finish, a real SIGTERM leaves
them with a summary marked partial, and ``--resume`` ends with the result of an uninterrupted
eval (same seeds). Real CLI subprocesses, a tiny model, real sandboxes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURE_TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"
EXPECTED = 6  # 3 tasks x 2 samples

ENV = {**__import__("os").environ, "COLUMNS": "400"}  # rich wraps stderr lines at 80 columns off a terminal


def eval_argv(model_dir: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "swerl.cli", "eval", str(FIXTURE_TASKS), "--model", str(model_dir),
            "--protocol", "single-turn", "--samples", "2", "--limit", "3", "--max-new-tokens", "8",
            "--concurrency", "1", "--seed", "1", "--threads", "1", "--out", str(out), *extra]


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]


def comparable(out: Path) -> tuple[list[dict], dict]:
    """Records and summary without wall-clock figures (pytest's output tail names its seconds)."""
    recs = [{**{k: v for k, v in r.items() if k != "timings_s"},
             "verifier_output_tail": re.sub(r"[\d.]+s\b", "Ns", r["verifier_output_tail"])} for r in rows(out)]
    summary = {k: v for k, v in json.loads((out / "summary.json").read_text()).items() if k != "wall_s"}
    return recs, summary


@pytest.mark.docker
@pytest.mark.slow
def test_sigterm_leaves_a_partial_result_that_resume_completes(tiny_model_dir, tmp_path):
    ref = tmp_path / "ref"
    done = subprocess.run(eval_argv(tiny_model_dir, ref), capture_output=True, text=True, timeout=600, env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    # Each line is a sample record swerl compare pairs: the seed of (--seed, task, sample) and pass/fail.
    from swerl.agent.collect import eval_episode_seed

    assert all(r["seed"] == eval_episode_seed(1, r["task"], r["sample_index"]) and r["passed"] == (
        r["outcome"] == "passed") for r in rows(ref))

    # SIGTERM once two episodes are on disk.
    out = tmp_path / "stopped"
    proc = subprocess.Popen(eval_argv(tiny_model_dir, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    traj_file = out / "trajectories.jsonl"
    deadline = time.monotonic() + 300
    while not (traj_file.is_file() and len(traj_file.read_text().splitlines()) >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, "the eval ended before two episodes were written"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-2000:]
    assert "partial summary" in stderr and "Traceback" not in stderr
    partial = json.loads((out / "summary.json").read_text())
    kept = rows(out)
    assert partial["partial"] is True and 2 <= partial["episodes_done"] == len(kept) < EXPECTED
    assert partial["num_trajectories"] == len(kept) and partial["episodes_expected"] == EXPECTED
    assert comparable(out)[0] == [r for r in comparable(ref)[0] if (r["group_id"], r["sample_index"]) in
                                  {(k["group_id"], k["sample_index"]) for k in kept}]

    # --resume runs only the missing episodes and ends where the uninterrupted eval ended.
    resumed = subprocess.run(eval_argv(tiny_model_dir, out, "--resume"), capture_output=True, text=True, timeout=600, env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"{len(kept)} episodes already done" in resumed.stderr
    assert comparable(out) == comparable(ref)
    assert comparable(ref)[1]["partial"] is False and comparable(ref)[1]["num_trajectories"] == EXPECTED


def test_resume_of_a_different_eval_is_refused_in_one_line(tmp_path, tiny_model_dir):
    out = tmp_path / "eval"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"model": str(tiny_model_dir), "backend": "hf", "protocol": "terminus-json"}))
    proc = subprocess.run(eval_argv(tiny_model_dir, out, "--resume"), capture_output=True, text=True,
                          timeout=120, env=ENV)
    assert proc.returncode == 2, proc.stderr
    assert "--resume" in proc.stderr and "protocol" in proc.stderr and "Traceback" not in proc.stderr
