"""Quiet, separated logs: other libraries' records (vLLM, transformers) reach the run's
train.log, not the terminal, unless ``-v``; ``--json -`` keeps stdout for the JSON even when
a library or a child process writes to file descriptor 1 itself; vLLM's "Failed to load weights"
of a tied head at a weight sync that succeeds is a DEBUG note, not a warning."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from swerl.cli.common import setup_logging
from swerl.logs import attach_run_log, detach_run_log

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_library_records_go_to_the_run_log_and_reach_the_terminal_only_with_v(verbose, tmp_path, capfd,
                                                                               restore_logging):
    setup_logging(verbose)
    run_log = attach_run_log(tmp_path)
    try:
        # Libraries' loggers by made-up names: vLLM's and transformers' own are configured by
        # whatever imported them earlier in the session (levels, handlers); the filter reads names.
        logging.getLogger("swerl.trainer.loop").info("step 1/4 | reward 0.5")
        logging.getLogger("somelib.engine").warning("chunked prefill is enabled")
        logging.getLogger("otherlib.modeling_utils").info("loading weights")
        logging.getLogger("somelib.engine").error("engine core died")
    finally:
        detach_run_log(run_log)
    terminal = capfd.readouterr()
    assert terminal.out == ""
    assert "step 1/4 | reward 0.5" in terminal.err and "engine core died" in terminal.err  # swerl's, and errors
    assert ("chunked prefill is enabled" in terminal.err) is verbose
    assert ("loading weights" in terminal.err) is verbose
    text = (tmp_path / "train.log").read_text()
    for line in ("step 1/4 | reward 0.5", "chunked prefill is enabled", "loading weights", "engine core died"):
        assert line in text, text


# A library that prints to stdout itself (as vLLM's own handler and its C++ code do), through
# Python and through the file descriptor, during a command with --json -.
NOISY = textwrap.dedent("""
    import os, sys
    import swerl.tasks as tasks
    real = tasks.load_tasks

    def noisy(*args, **kwargs):
        print("INFO library says hello on stdout")
        sys.stdout.flush()
        os.write(1, b"raw bytes on fd 1\\n")
        __import__("subprocess").run(["echo", "a child on stdout"])
        return real(*args, **kwargs)

    tasks.load_tasks = noisy
    sys.argv = ["swerl", *sys.argv[1:]]
    from swerl.cli import main
    main()
""")


def test_json_dash_stays_parseable_when_a_library_writes_to_stdout():
    proc = subprocess.run([sys.executable, "-c", NOISY, "tasks", "list", str(FIXTURE_TASKS), "--json", "-"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert isinstance(json.loads(proc.stdout), list)  # nothing but the JSON on stdout
    for noise in ("library says hello", "raw bytes on fd 1", "a child on stdout"):
        assert noise in proc.stderr and noise not in proc.stdout


def test_a_tied_head_without_weights_at_a_reload_is_a_debug_note(caplog):
    from swerl.inference.engines.vllm_worker import RELOAD_LOGGER, quiet_tied_head_warning

    quiet_tied_head_warning()
    quiet_tied_head_warning()  # once: a second call adds no second filter
    logger = logging.getLogger(RELOAD_LOGGER)
    assert len(logger.filters) == 1
    with caplog.at_level(logging.DEBUG, logger=RELOAD_LOGGER):
        logger.warning("%s: Failed to load weights", "ParallelLMHead")
        logger.warning("%s: Failed to load weights", "QKVParallelLinear")  # not a head: still a warning
    (head, other) = caplog.records
    assert head.levelno == logging.DEBUG and "Failed" not in head.getMessage() and "re-packs" in head.getMessage()
    assert other.levelno == logging.WARNING and other.getMessage() == "QKVParallelLinear: Failed to load weights"


DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
WITH_VLLM = textwrap.dedent("""
    import sys
    from swerl.inference.engines.vllm_backend import import_vllm
    import_vllm()  # vLLM imported (and its logging set up) before the command parses its flags
    sys.argv = ["swerl", *sys.argv[1:]]
    from swerl.cli import main
    main()
""")


COMMANDS = {
    "eval": ["eval", str(FIXTURE_TASKS), "--limit", "1", "--backend", "vllm", "--protocol", "single-turn",
             "--max-new-tokens", "4", "-c", "1"],
    "train": ["train", str(DEMO_YAML), "--dry-run", "--set", f"data.tasks={FIXTURE_TASKS}", "--set", "data.names=null",
              "--set", "loop.train_batch_size=1", "--set", "generator.backend=vllm"],
}


@pytest.mark.vllm
@pytest.mark.docker
@pytest.mark.parametrize("name", ["train"])  # eval with an in-process engine: minutes on CPU, not in the suite
def test_json_dash_of_eval_and_train_dry_run_parse_with_vllm_loaded(name, tmp_path):
    """The dry-run runs with vLLM imported first (COMMANDS["eval"] samples with an in-process engine)."""
    proc = subprocess.run([sys.executable, "-c", WITH_VLLM, *COMMANDS[name], "-o", str(tmp_path / "out"), "--json", "-"],
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(proc.stdout)  # nothing but the JSON on stdout
    assert ("pass@1" if name == "eval" else "plan") in payload
    # vLLM's INFO/WARNING lines (its own format, or its loggers through swerl's) stay off the terminal.
    # (vLLM's own format starts with the level; through swerl's handler a record reads "... LEVEL vllm.x: ...";
    # the printed config's "vllm_mode:" is neither.)
    noisy = [line for line in proc.stderr.splitlines()
             if line.startswith(("INFO ", "WARNING ", "DEBUG ")) or re.search(r"\s(INFO|WARNING|DEBUG)\s+vllm[\w.]*:", line)]
    assert not noisy, noisy[:5]
