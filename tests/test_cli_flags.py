"""One flag vocabulary across commands: -v, --json PATH|-, --out/-o, -c/--concurrency, enum choices."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, get_args

import pytest
import typer
from typer.testing import CliRunner

from swerl import cli
from swerl.cli import app

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
runner = CliRunner()


def _commands(group: Any, prefix: str = "") -> dict[str, Any]:
    found = {}
    for name, command in group.commands.items():
        if hasattr(command, "commands"):  # a group (typer vendors its own click)
            found.update(_commands(command, f"{prefix}{name} "))
        else:
            found[f"{prefix}{name}"] = command
    return found


COMMANDS = _commands(typer.main.get_command(app))


def _flags(command: Any) -> set[str]:
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_takes_verbose(name):
    assert {"-v", "--verbose"} <= _flags(COMMANDS[name])


def test_verbose_after_a_command_turns_on_debug_logging():
    result = runner.invoke(app, ["tasks", "list", str(FIXTURE_TASKS), "-v"])
    assert result.exit_code == 0, result.output
    assert logging.getLogger().level == logging.DEBUG


def test_output_folder_and_concurrency_have_one_name():
    for name in ("train", "eval"):
        assert {"--out", "-o", "-c", "--concurrency"} <= _flags(COMMANDS[name]), name
    assert {"-c", "--concurrency"} <= _flags(COMMANDS["sandbox-test"])
    assert "--run-dir" in _flags(COMMANDS["train"])  # kept as an alias


@pytest.mark.parametrize("name", ["train", "eval", "sandbox-test", "select-checkpoint", "tasks list",
                                  "tasks validate", "report"])
def test_reporting_commands_take_json_path(name):
    option = next(p for p in COMMANDS[name].params if "--json" in p.opts)
    assert not option.is_flag and option.metavar == "PATH"


def test_enum_choices_match_the_config_literals():
    from swerl.agent.config import ProtocolName, SingleTurnPrefill
    from swerl.inference.config import BACKENDS

    assert [p.value for p in cli.Protocol] == list(get_args(ProtocolName))
    assert [p.value for p in cli.Prefill] == list(get_args(SingleTurnPrefill))
    resolved_by_train = {"auto"}  # swerl train resolves generator.backend: auto; eval takes a backend as it is
    assert [b.value for b in cli.Backend] == [b for b in BACKENDS if b not in resolved_by_train]


@pytest.mark.parametrize("args, flag", [
    (["eval", str(FIXTURE_TASKS), "--backend", "tgi"], "'--backend'"),
    (["eval", str(FIXTURE_TASKS), "--protocol", "bogus"], "'--protocol'"),
    (["eval", str(FIXTURE_TASKS), "--prefill", "half"], "'--prefill'"),
    (["select-checkpoint", str(FIXTURE_TASKS), "--mode", "median"], "'--mode'"),
])
def test_a_bad_choice_names_the_flag_and_exits_2(args, flag):
    result = runner.invoke(app, args)  # CliRunner: click's standalone mode (main() makes it one line, below)
    assert result.exit_code == 2 and f"Invalid value for {flag}" in result.output


def test_usage_errors_through_main_are_one_line_on_stderr():
    import subprocess
    import sys

    for args, flag in ((["train", "c.yaml", "--bogus"], "--bogus"), (["select-checkpoint", "r", "--mode", "median"], "'--mode'"),
                       (["eval", "t", "--backend", "tgi"], "'--backend'")):
        proc = subprocess.run([sys.executable, "-m", "swerl.cli", *args], capture_output=True, text=True, timeout=60)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], proc.stderr
        assert proc.stdout == ""


def test_tasks_list_json_to_stdout_is_the_only_stdout():
    result = runner.invoke(app, ["tasks", "list", str(FIXTURE_TASKS), "--json", "-"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 3 and {"name", "image", "oracle"} <= set(rows[0])


def test_tasks_validate_json_to_a_file(tmp_path):
    out = tmp_path / "deep" / "v.json"
    result = runner.invoke(app, ["tasks", "validate", str(FIXTURE_TASKS), "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert len(report["valid"]) == 3 and report["malformed"] == []
    assert "3 valid, 0 malformed" in result.stdout


def test_train_concurrency_flag_sets_rollout_concurrency(tmp_path, monkeypatch):
    # Stop right after the config is loaded: the flag's effect is the loaded config.
    seen = {}

    def stop(cfg, run_dir, resume, world_size=1):  # noqa: ANN001
        seen.update(cfg=cfg, run_dir=run_dir)
        raise typer.Exit(0)

    monkeypatch.setattr("swerl.trainer.setup.preflight.run_preflight", stop)
    result = runner.invoke(app, ["train", str(DEMO_YAML), "-c", "3", "--run-dir", str(tmp_path / "r"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert seen["cfg"].loop.rollout_concurrency == 3 and seen["run_dir"] == tmp_path / "r"
