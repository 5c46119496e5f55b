"""`swerl train` preflight: what the run would reject fails in `--dry-run` too, with one line, exit 2
(config, tasks, run dir, disk) or 3 (environment), and before any file of the run is written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.errors import ConfigError, EnvironmentProblem

ROOT = Path(__file__).resolve().parents[3]
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
        "tie_word_embeddings": True}


def _model(tmp_path: Path, **shape) -> Path:
    """A model folder as the preflight sees it: config.json only (the checks load no weights)."""
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**TINY, **shape}))
    return folder


def _dry_run(tmp_path: Path, *sets: str, resume: str | None = None) -> tuple[int, list[str], Path]:
    """`swerl train DEMO --dry-run` in a subprocess (stderr a pipe); returns (exit code, stderr lines, run dir)."""
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "swerl.cli", "train", str(DEMO_YAML), "--dry-run", "--out", str(run_dir),
            "--set", f"data.tasks={FIXTURE_TASKS}", "--set", "data.names=null", "--set", "loop.train_batch_size=1",
            *[a for s in sets for a in ("--set", s)], *(["--resume", resume] if resume else [])]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return proc.returncode, [ln for ln in proc.stderr.splitlines() if ln.strip()], run_dir


def _one_error(lines: list[str]) -> str:
    errors = [ln for ln in lines if "error:" in ln]
    assert len(errors) == 1 and not any("Traceback" in ln for ln in lines), lines
    return errors[0]


def test_missing_model_path_fails_the_dry_run_with_exit_2(tmp_path):
    code, lines, run_dir = _dry_run(tmp_path, f"model.path={tmp_path / 'nowhere'}")
    assert code == 2 and "nowhere" in _one_error(lines) and "not found" in _one_error(lines)
    assert not run_dir.exists()


def test_a_zero_step_plan_fails_the_dry_run_with_exit_2(tmp_path):
    code, lines, run_dir = _dry_run(tmp_path, f"model.path={_model(tmp_path)}", "loop.train_batch_size=4")
    assert code == 2 and "the plan trains 0 steps: 3 tasks" in _one_error(lines)
    assert not run_dir.exists()


def test_existing_checkpoints_without_resume_fail_the_dry_run(tmp_path):
    ckpt = tmp_path / "run" / "checkpoints" / "global_step_1"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{}")
    code, lines, _ = _dry_run(tmp_path, f"model.path={_model(tmp_path)}")
    assert code == 2 and "already holds checkpoints: pass --resume latest" in _one_error(lines)


def test_too_little_disk_for_the_planned_checkpoints_fails_with_exit_2(tmp_path):
    # ~1.2 T parameters: its checkpoints and exports cannot fit on any test machine's disk.
    huge = _model(tmp_path, hidden_size=65536, intermediate_size=262144, num_hidden_layers=96,
                  num_attention_heads=512, num_key_value_heads=512)
    code, lines, run_dir = _dry_run(tmp_path, f"model.path={huge}")
    error = _one_error(lines)
    assert code == 2 and "GB of checkpoints and exports" in error and "checkpointing.keep_last" in error
    assert not run_dir.exists()


def test_unreachable_docker_fails_the_dry_run_with_exit_3(tmp_path):
    code, lines, _ = _dry_run(tmp_path, f"model.path={_model(tmp_path)}",
                              f"sandbox.docker_base_url=unix://{tmp_path}/no-docker.sock")
    assert code == 3 and "Docker is not reachable" in _one_error(lines)


def test_vllm_backend_without_vllm_installed_fails_with_exit_3(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # find_spec("vllm") is None: as if not installed
    result = CliRunner().invoke(app, [
        "train", str(DEMO_YAML), "--dry-run", "--out", str(tmp_path / "run"), "--set", f"data.tasks={FIXTURE_TASKS}",
        "--set", "data.names=null", "--set", "loop.train_batch_size=1", "--set", f"model.path={_model(tmp_path)}",
        "--set", "generator.backend=vllm"])  # over the demo's auto section: its vllm section
    # CliRunner calls the app, not main(): the SwerlError arrives as the exception that main() maps to its exit code.
    assert isinstance(result.exception, EnvironmentProblem) and result.exception.exit_code == 3
    assert "generator.backend=vllm needs the vllm package" in str(result.exception)


@pytest.mark.docker
def test_a_missing_base_image_fails_the_dry_run_with_exit_3(tmp_path):
    tasks = tmp_path / "tasks"
    shutil.copytree(FIXTURE_TASKS, tasks)
    dockerfile = next(tasks.glob("*/environment/Dockerfile"))
    dockerfile.write_text("FROM swerl-preflight-test/absent:never\n")
    code, lines, _ = _dry_run(tmp_path, f"model.path={_model(tmp_path)}", f"data.tasks={tasks}")
    assert code == 3 and "image swerl-preflight-test/absent:never" in _one_error(lines)


@pytest.mark.docker
def test_a_runnable_config_passes_and_prints_the_checks_as_json(tmp_path):
    code, lines, run_dir = _dry_run(tmp_path, f"model.path={_model(tmp_path)}")
    assert code == 0, lines
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", "train", str(DEMO_YAML), "--dry-run", "-o", str(run_dir),
                           "--set", f"data.tasks={FIXTURE_TASKS}", "--set", "data.names=null", "--set",
                           "loop.train_batch_size=1", "--set", f"model.path={_model(tmp_path)}", "--json", "-"],
                          capture_output=True, text=True, timeout=120)
    report = json.loads(proc.stdout)
    assert report["plan"]["num_tasks"] == 3 and report["images"] == ["python:3.10-slim"]
    assert 0 < report["disk_needed_bytes"] < report["disk_free_bytes"]
    assert not run_dir.exists()


@pytest.mark.parametrize("refusal", ["existing checkpoints", "zero-step plan", "not a checkpoint"])
def test_each_refusal_reads_the_same_from_swerl_train_and_from_train(tmp_path, refusal):
    """One wording per refusal: ``swerl train`` (its preflight) and ``train()`` called as a
    library (which runs the same preflight itself) raise the same error, before any file."""
    from swerl.trainer.config import load_train_config
    from swerl.trainer.loop import train

    run_dir = tmp_path / "run"
    sets = [f"data.tasks={FIXTURE_TASKS}", "data.names=null", f"model.path={_model(tmp_path)}",
            "loop.train_batch_size=4" if refusal == "zero-step plan" else "loop.train_batch_size=1"]
    resume = str(tmp_path / "elsewhere") if refusal == "not a checkpoint" else None
    if refusal == "existing checkpoints":
        (run_dir / "checkpoints" / "global_step_1").mkdir(parents=True)
        (run_dir / "checkpoints" / "global_step_1" / "trainer_state.json").write_text("{}")
    result = CliRunner().invoke(app, ["train", str(DEMO_YAML), "--out", str(run_dir), *(["--resume", resume] if resume else []),
                                      *[a for s in sets for a in ("--set", s)]])
    assert isinstance(result.exception, ConfigError), result.output  # CliRunner: main() would print it, exit 2
    with pytest.raises(ConfigError) as raised:
        train(load_train_config(DEMO_YAML, sets), run_dir, resume)
    assert str(raised.value) == str(result.exception)
    expected = {"existing checkpoints": "already holds checkpoints: pass --resume latest, or another --out",
                "zero-step plan": "the plan trains 0 steps: 3 tasks", "not a checkpoint": "not a checkpoint folder"}
    assert expected[refusal] in str(raised.value)
    left = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else []
    assert left == (["checkpoints"] if refusal == "existing checkpoints" else [])


@pytest.mark.docker  # the dry run asks Docker for the tasks' images
def test_resume_latest_with_nothing_to_resume_says_the_run_starts_at_step_1(tmp_path):
    code, lines, run_dir = _dry_run(tmp_path, f"model.path={_model(tmp_path)}", resume="latest")
    assert code == 0, lines
    assert any(f"--resume latest: {run_dir} holds no checkpoint yet, so the run starts at step 1" in ln
               for ln in lines), lines


@pytest.mark.docker
def test_the_dry_run_says_when_the_engine_disk_holds_fewer_trials_than_run_at_once(tmp_path):
    """Each trial reserves its storage_mb on the engine's disk: a task set whose budgets the free disk
    cannot hold at the run's concurrency gets one note naming the free MiB and how many trials fit;
    the fixtures' 1 GiB budgets at concurrency 2 get none."""
    from swerl.trainer.config import load_train_config
    from swerl.trainer.setup.preflight import check_sandbox_disk
    from swerl.tasks import load_tasks

    tasks = tmp_path / "tasks"
    shutil.copytree(FIXTURE_TASKS, tasks)
    cfg = load_train_config(DEMO_YAML, [f"data.tasks={tasks}", "sandbox.concurrency=2"])
    assert check_sandbox_disk(cfg, list(load_tasks(tasks))) == []
    for toml in tasks.glob("*/task.toml"):
        toml.write_text(toml.read_text().replace("storage_mb = 1024", f"storage_mb = {1 << 24}"))  # 16 TiB each
    [note] = check_sandbox_disk(cfg, list(load_tasks(tasks)))
    assert note.startswith("sandbox disk: Docker's data root") and "holds 0 trials of the tasks' storage_mb = 16777216" \
        in note and "not the 2 in flight" in note, note
