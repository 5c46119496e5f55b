"""Logs off a terminal: heartbeat lines during long phases, and the run's train.log."""

from __future__ import annotations

import io
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


def test_a_phase_beats_while_it_runs_and_closes_with_one_line(caplog, monkeypatch):
    from swerl.logs import phase

    monkeypatch.setenv("SWERL_HEARTBEAT_S", "0.05")
    with caplog.at_level(logging.INFO, logger="swerl.heartbeat"), phase("image build t", unit="steps") as clock:
        clock.done, clock.total = 2, 5
        time.sleep(0.3)
    beats = [r.getMessage() for r in caplog.records if r.name == "swerl.heartbeat"]
    assert re.fullmatch(r"image build t: 2/5 steps done, \d+ s", beats[0])
    assert re.fullmatch(r"image build t: done in \d+ s", beats[-1]) and len(beats) >= 3


def test_a_phase_decorates_a_function_and_lets_its_errors_through(caplog, monkeypatch):
    import pytest

    from swerl.logs import phase

    monkeypatch.setenv("SWERL_HEARTBEAT_S", "0.05")

    @phase("checkpoint save")
    def save(fail: bool) -> str:
        time.sleep(0.12)
        if fail:
            raise OSError("disk full")
        return "saved"

    with caplog.at_level(logging.INFO, logger="swerl.heartbeat"):
        assert save(False) == "saved"
        with pytest.raises(OSError, match="disk full"):
            save(True)
    beats = [r.getMessage() for r in caplog.records if r.name == "swerl.heartbeat"]
    assert any(re.fullmatch(r"checkpoint save: \d+ s", b) for b in beats)
    assert len([b for b in beats if "done in" in b]) == 1  # the failed call does not claim it is done


def test_an_installed_display_replaces_the_heartbeat(caplog, monkeypatch):
    import contextlib

    from swerl.logs import phase, set_phase_display

    monkeypatch.setenv("SWERL_HEARTBEAT_S", "0.05")
    shown = []

    @contextlib.contextmanager
    def display(clock):  # noqa: ANN001, ANN202
        shown.append(clock.name)
        yield

    previous = set_phase_display(display)
    try:
        with caplog.at_level(logging.INFO, logger="swerl.heartbeat"), phase("export"):
            time.sleep(0.02)
    finally:
        set_phase_display(previous)
    assert shown == ["export"] and not [r for r in caplog.records if r.name == "swerl.heartbeat"]


def test_a_library_phase_inside_a_command_is_named_by_its_one_heartbeat(caplog, monkeypatch):
    from swerl.logs import command_heartbeat, phase

    monkeypatch.setenv("SWERL_HEARTBEAT_S", "0.05")
    clock = PhaseClock()
    clock.start("update", scope="step 3/10")
    with caplog.at_level(logging.INFO, logger="swerl.heartbeat"), command_heartbeat(clock):
        with phase("checkpoint save"):
            first = len(caplog.records)
            time.sleep(0.3)
            saving = [r.getMessage() for r in caplog.records[first:]]
        time.sleep(0.15)
    beats = saving[1:]  # the first may have been composed just before the save began
    assert beats and all(re.fullmatch(r"step 3/10 checkpoint save: \d+ s", b) for b in beats), beats
    assert re.fullmatch(r"step 3/10 update: \d+ s", caplog.records[-1].getMessage())  # the save ended


def test_a_counted_phase_keeps_its_count_after_the_phase_inside_it():
    outer, inner = PhaseClock(), PhaseClock()
    outer.start("rollouts", total=16, unit="episodes", scope="step 1/4")
    inner.start("generate (batch of 16)", total=512, unit="tokens/row")
    inner.advance(212)
    outer.inner.append(inner)
    assert re.fullmatch(r"step 1/4 generate \(batch of 16\): 212/512 tokens/row done, \d+ s; "
                        r"rollouts: 0/16 episodes done, \d+ s", outer.line())


def test_records_held_before_the_run_dir_exists_open_its_train_log(tmp_path):
    from swerl.logs import hold_records

    logger = logging.getLogger("swerl.test_logs")
    logger.setLevel(logging.INFO)
    held = hold_records()
    logger.warning("skipping malformed task: t1")
    logger.info("auto: model.dtype -> float32")  # every record, not only the first
    earlier = held.take()
    logger.warning("not held")  # taken: no longer kept
    handler = attach_run_log(tmp_path / "run", earlier)
    logger.info("training")
    detach_run_log(handler)
    lines = (tmp_path / "run" / "train.log").read_text().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == ["skipping malformed task: t1", "auto: model.dtype -> float32",
                                                          "training"]
    assert re.fullmatch(ISO + r" WARNING swerl\.test_logs: skipping malformed task: t1", lines[0])


def test_a_non_propagating_library_logger_routed_to_the_run_log_reaches_train_log(tmp_path):
    # vLLM configures its "vllm" logger so (own stream handler, propagate False) when its engine
    # is built; the in-process backend then routes it to the open run log.
    from swerl.logs import route_to_run_log

    library = logging.getLogger("swerl-test-library")
    library.propagate, library.level = False, logging.INFO
    own = logging.StreamHandler(io.StringIO())
    library.addHandler(own)
    handler = attach_run_log(tmp_path / "run")
    try:
        logging.getLogger("swerl-test-library.engine").info("before routing")
        route_to_run_log("swerl-test-library")
        route_to_run_log("swerl-test-library")  # once is enough
        logging.getLogger("swerl-test-library.engine").info("KV cache: 1234 tokens")
    finally:
        detach_run_log(handler)
        library.removeHandler(own)
    logging.getLogger("swerl-test-library").info("after the run")
    text = (tmp_path / "run" / "train.log").read_text()
    assert "KV cache: 1234 tokens" in text and text.count("KV cache") == 1
    assert "before routing" not in text and "after the run" not in text and library.handlers == []
