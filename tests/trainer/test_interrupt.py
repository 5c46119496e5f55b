"""Ctrl-C (SIGINT) and SIGTERM of a real ``swerl train``, during the rollouts of a step and
during its update: one ``interrupted:`` line naming the step reached, the last checkpoint and
the resume command; exit 130 (143 for SIGTERM); no traceback; no container left behind; and the
printed command resumes at the step the line names.

Each run is the real CLI in a subprocess (tiny model, the learning tasks in real sandboxes) with
one function wrapped so that it writes a marker file at the moment of interest, then the test
sends the signal. Also: the StopSignals handler's deferral of a signal during a step's commit.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from swerl.trainer.loop import StopSignal, StopSignals

from .test_loop import tiny_config

STOP_STEP = 2
# The child: at step STOP_STEP, write the marker once the phase is under way, then the real CLI.
#   rollouts: the first episode of the step has started (sandboxes and generation in flight)
#   update:   the optimizer step is running (held there until the signal arrives)
CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    phase, step, marker = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])

    from swerl.trainer import loop
    real_update, real_emit = loop.train_on_batch, loop.TrainEvent

    def train_on_batch(*args, **kwargs):
        if phase == "update" and loop_step[0] == step:
            marker.write_text(phase)
            time.sleep(600)
        return real_update(*args, **kwargs)

    loop_step = [0]

    class TrainEvent(real_emit):
        def __init__(self, kind, at=0, data=None):
            super().__init__(kind, at, data)
            if kind == "step_start":
                loop_step[0] = at
            if phase == "rollouts" and kind == "rollout" and at == step and not marker.exists():
                marker.write_text(phase)

    loop.train_on_batch, loop.TrainEvent = train_on_batch, TrainEvent
    sys.argv = ["swerl", *sys.argv[4:]]
    from swerl.cli import main
    main()
""")


def run_child(argv: list[str], log: Path, marker: Path | None = None, sig: int = signal.SIGINT,
              timeout_s: float = 300) -> tuple[int, int]:
    """Run ``argv``; with ``marker``, send ``sig`` once the marker exists. Returns (exit code, pid)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        try:
            sent = False
            while proc.poll() is None and time.monotonic() < deadline:
                if marker is not None and not sent and marker.exists():
                    time.sleep(0.3)  # well inside the phase
                    os.kill(proc.pid, sig)
                    sent = True
                time.sleep(0.05)
            assert proc.poll() is not None, f"{argv[:4]} did not finish in {timeout_s}s: {log.read_text()[-2000:]}"
            return proc.returncode, proc.pid
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def containers_of(pid: int) -> list:
    import docker

    from swerl.sandbox.docker_api import LABEL_PID

    client = docker.from_env()
    try:
        return client.containers.list(all=True, filters={"label": f"{LABEL_PID}={pid}"})
    finally:
        client.close()


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize(("sig", "phase", "sets"), [
    (signal.SIGINT, "rollouts", []), (signal.SIGINT, "update", []),
    # step 1's checkpoint is still uncommitted when the signal comes (written in the background): the stop commits it
    (signal.SIGINT, "rollouts", ["--set", "checkpointing.async_save=true"])],
    ids=["sigint-rollouts", "sigint-update", "sigint-rollouts-background-checkpoint"])
def test_a_signal_ends_with_one_line_and_the_resume_continues_where_it_said(sig, phase, sets, tmp_path, tiny_model_dir):
    cfg_path, run = tmp_path / "cfg.yaml", tmp_path / "run"
    cfg_path.write_text(tiny_config(tiny_model_dir, max_steps=STOP_STEP).to_yaml())
    marker, log = tmp_path / "marker", tmp_path / "child.log"
    argv = [sys.executable, "-c", CHILD, phase, str(STOP_STEP), str(marker), "train", str(cfg_path),
            "--run-dir", str(run), "--set", "sandbox.concurrency=4", *sets]
    code, pid = run_child(argv, log, marker, sig)
    text = log.read_text()

    assert marker.exists(), text[-3000:]
    assert code == 128 + sig, text[-3000:]
    assert "Traceback" not in text and "InvalidStateError" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if line.startswith("interrupted:")]
    assert len(lines) == 1, text[-3000:]
    line = lines[0]
    name = signal.Signals(sig).name
    assert f"{name} at step {STOP_STEP}/{STOP_STEP} ({phase})" in line, line
    assert f"last checkpoint: step {STOP_STEP - 1} ({run / 'checkpoints' / 'global_step_1'})" in line, line
    assert f"a resume starts at step {STOP_STEP}" in line, line
    assert [json.loads(r)["global_step"] for r in (run / "metrics.jsonl").read_text().splitlines()] == [1]
    assert not list((run / "checkpoints").glob("global_step_2*"))
    # Pending episodes were cancelled and their sandboxes removed before the exit.
    assert not containers_of(pid)

    # The printed command, as printed, resumes at step STOP_STEP and finishes the run.
    command = line.split("resume: ", 1)[1]
    words = shlex.split(command)
    assert words[-2:] == ["--resume", "latest"] and "--set" in words and "sandbox.concurrency=4" in words
    result = tmp_path / "resume.json"
    assert run_child([*words, "--json", str(result)], tmp_path / "resume.log")[0] == 0, \
        (tmp_path / "resume.log").read_text()[-3000:]
    payload = json.loads(result.read_text())
    assert (payload["steps_trained"], payload["last_step"]) == (1, STOP_STEP)
    assert [json.loads(r)["global_step"] for r in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_a_signal_during_a_deferred_block_is_raised_when_the_block_ends():
    """A step's commit is not cut by a first signal: it is raised once the commit is written."""
    finished = []
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN under a shell's `&`, else Python's default handler
    with StopSignals() as stops:
        with pytest.raises(StopSignal) as caught:
            with stops.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                finished.append("commit")
        assert finished == ["commit"] and caught.value.signum == signal.SIGTERM
        with pytest.raises(StopSignal):  # outside a deferred block: at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert signal.getsignal(signal.SIGINT) is before  # the handlers restored
