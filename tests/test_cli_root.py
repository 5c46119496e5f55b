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
