"""Logs off a terminal: heartbeat lines during long phases, and the run's train.log."""

from __future__ import annotations

import logging
import re
import time

from swerl.logs import Heartbeat, PhaseClock, attach_run_log, detach_run_log

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def test_heartbeat_logs_the_phase_progress_while_the_block_runs(caplog):
    clock = PhaseClock()
    clock.start("rollouts", total=16, unit="episodes")
    clock.advance(9)
    with caplog.at_level(logging.INFO, logger="swerl.heartbeat"), Heartbeat(clock.line, 0.05):
        time.sleep(0.3)
    beats = [r.getMessage() for r in caplog.records if r.name == "swerl.heartbeat"]
    assert len(beats) >= 2 and re.fullmatch(r"rollouts: 9/16 episodes done, \d+ s", beats[0])
    count = len(beats)
    time.sleep(0.15)  # the thread stopped with the block
    assert len([r for r in caplog.records if r.name == "swerl.heartbeat"]) == count


def test_heartbeat_is_silent_when_disabled_or_nothing_runs(caplog):
    with caplog.at_level(logging.INFO, logger="swerl.heartbeat"):
        with Heartbeat(lambda: "busy", 0.05, enabled=False):
            time.sleep(0.15)
        with Heartbeat(PhaseClock().line, 0.05):
            time.sleep(0.15)
    assert not [r for r in caplog.records if r.name == "swerl.heartbeat"]


def test_phase_without_a_count_reads_its_age():
    clock = PhaseClock()
    clock.start("update")
    assert re.fullmatch(r"update: \d+ s", clock.line())


def test_run_log_gets_iso_lines_and_a_resume_appends(tmp_path):
    logger = logging.getLogger("swerl.test_logs")
    logger.setLevel(logging.INFO)
    for text in ("first run", "resumed run"):
        handler = attach_run_log(tmp_path / "run")
        logger.info(text)
        detach_run_log(handler)
    lines = (tmp_path / "run" / "train.log").read_text().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(ISO + r" INFO +swerl\.test_logs: first run", lines[0])
    assert lines[1].endswith("resumed run")
