"""Bad input on any command: one `error:` line on stderr, exit 2 (3 for the environment), nothing
on stdout and no file written (the commands run in an empty folder that must stay empty)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "tests" / "fixtures" / "tasks")
DEMO_YAML = str(ROOT / "examples" / "humaneval-smollm2-cpu.yaml")
LEARNING = str(ROOT / "examples" / "learning_tasks")

CASES = [
    (["eval", "/nowhere", "-o", "out"], 2, "/nowhere: no such file or folder"),
    (["eval", TASKS, "--model", "/nowhere", "-o", "out"], 2, "model '/nowhere' not found"),
    (["eval", TASKS, "--engine", "bogus://x", "-o", "out"], 2, "--engine: "),
    (["eval", TASKS, "--step", "3", "-o", "out"], 2, "--step needs --from-run"),
    (["sandbox-test", "/nowhere"], 2, "/nowhere: no such file or folder"),
    (["sandbox-test"], 2, "pass a task source (TASKS) or a train config (--config TRAIN_YAML), not neither"),
    (["sandbox", "gc", "--engine", "unix:///nowhere/docker.sock"], 3, "Docker is not reachable"),
    (["train", DEMO_YAML, "-o", "run"], 2, "run: swerl tasks import humaneval runs/humaneval-tasks"),
    (["tasks", "import", "humaneval", "he", "--limit", "0"], 2, "'--limit'"),
    (["train", DEMO_YAML, "--set", "loop.max_steps=-1"], 2, "must be >= 1 (or null); got -1: set loop.max_steps to 1"),
    (["train", DEMO_YAML, "--set", "algorithm.n_samples_per_prompt=1"], 2, "set n_samples_per_prompt >= 2"),
    (["view", "/nowhere"], 2, "/nowhere does not exist"),
    (["select-checkpoint", "run", "--mode", "best"], 2, "Invalid value for '--mode': 'best' is not one of 'max', 'min'."),
    # A device that is not there: refused before anything loads (no GPU index 99 on any machine).
    (["eval", TASKS, "--device", "cuda:99", "-o", "out"], 2, "--device: cuda:99, but this machine has"),
    # A name that matches no task is a typo, not a task dropped in silence: named with the closest names.
    (["train", DEMO_YAML, "--dry-run", "--set", f"data.tasks={LEARNING}", "--set", "data.names=[magic-a, magic-bb]"],
     2, "data.names: 'magic-bb' (closest: magic-b"),
    (["train", DEMO_YAML, "--dry-run", "--set", f"data.tasks={LEARNING}", "--set", "data.names=null",
      "--set", "data.exclude=[magic-a, magic-e]"], 2, "data.exclude: 'magic-e' (closest: magic-"),
    (["train", DEMO_YAML, "--dry-run", "--set", f"data.tasks={LEARNING}", "--set", "data.names=null",
      "--set", f"eval={{tasks: {LEARNING}, names: [magic-c, magic-x]}}"], 2, "eval.names: 'magic-x' (closest: magic-"),
    # A field of another generator backend: pydantic's extra-field error, named with the backend that has it.
    (["train", DEMO_YAML, "--dry-run", "--set", "generator.backend=hf", "--set", "generator.max_model_len=4096"], 2,
     "--set generator.max_model_len=4096: generator.max_model_len: not a field of backend 'hf' (a field of vllm)"),
    (["train", DEMO_YAML, "--dry-run", "--set", "generator.num_threads=2"], 2,
     "generator.num_threads: a field of backend hf: under backend auto it goes in generator.hf"),
]


@pytest.mark.parametrize("argv, code, words", CASES, ids=[f"{c[0][0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_and_writes_nothing(argv, code, words, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", *argv], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == code and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("error: ") and words in lines[0] and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a machine without a CUDA GPU")
def test_a_cuda_device_on_a_cpu_machine_is_one_line_at_the_dry_run(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", "train", DEMO_YAML, "--dry-run", "--set",
                           "model.device=cuda"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("error: model.device: cuda, but this machine has no CUDA GPU") and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


HEAVY = ("torch", "transformers", "docker", "requests", "numpy", "vllm", "swerl.sandbox.manager", "swerl.agent.episode")
_VALIDATE_ONLY = """
import sys
from swerl.cli import main
sys.argv = ["swerl", "train", sys.argv[1]]
try:
    main()
except SystemExit as done:
    heavy = sorted(name for name in {heavy!r} if name in sys.modules)
    print(done.code, ",".join(heavy))
"""


def test_a_config_error_is_found_before_any_heavy_module_is_imported(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("loop:\n  train_batch_sise: 4\n")
    proc = subprocess.run([sys.executable, "-c", _VALIDATE_ONLY.format(heavy=HEAVY), str(bad)], capture_output=True,
                          text=True, timeout=120)
    assert proc.stderr.startswith(f"error: {bad}: "), proc.stderr
    assert proc.stdout.split() == ["2"], proc.stdout  # exit 2, and none of HEAVY in sys.modules
