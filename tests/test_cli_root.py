"""The root of the CLI: version, short help, and error lines that keep their brackets."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from typer.testing import CliRunner

from swerl.cli import app

runner = CliRunner()


def test_version_prints_the_installed_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"swerl {version('swerl')}"


def test_short_help_works_on_the_root_and_on_subcommands():
    root = runner.invoke(app, ["-h"])
    sub = runner.invoke(app, ["select-checkpoint", "-h"])
    assert root.exit_code == 0 and "sandbox-test" in root.stdout
    assert sub.exit_code == 0 and "--metric" in sub.stdout


def test_error_lines_keep_square_brackets(tmp_path):
    # A config error whose message holds brackets: rich markup must not eat them.
    bad = tmp_path / "bad[gpu].yaml"
    bad.write_text("data: [\n")
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", "train", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "bad[gpu].yaml" in proc.stderr


def test_verbose_shows_every_further_config_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: {tasks: x}\nloop: {max_steps: abc, epochs: many}\n")
    for flags, shown in (([], False), (["-v"], True)):
        proc = subprocess.run([sys.executable, "-m", "swerl.cli", "train", str(bad), "--dry-run", *flags],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "(+1 more; -v shows them)" in proc.stderr
        assert ("also: " in proc.stderr) is shown
        assert (f"{bad}: loop.max_steps: expected an integer, e.g. 3; got 'abc'" in proc.stderr) is shown


def test_logs_off_a_terminal_have_iso_timestamps_and_are_not_wrapped(tmp_path):
    # A long config error path, stderr to a pipe: one log line, not cut at 80 columns.
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    cfg = deep / "c.yaml"
    cfg.write_text("data: {tasks: /nowhere}\nnot_a_section: 1\n")
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", "train", str(cfg), "--dry-run"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    error_lines = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(error_lines) == 1 and str(cfg) in error_lines[0]


def test_log_records_off_a_terminal_carry_utc_iso_timestamps():
    import re

    code = ("import logging, swerl.cli as c; c._setup_logging(); "
            "logging.getLogger('swerl.test').info('hello from the test')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    line = proc.stderr.strip().splitlines()[-1]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO +swerl\.test: hello from the test$", line), line
