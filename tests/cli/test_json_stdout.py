"""`--json -` on every command that has `--json`: stdout is exactly one JSON document (tables and
logs go to stderr), whatever the command found; a `--json` path that cannot be written fails at
parse time, before the command runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from swerl.cli import app

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
ARMS = sorted((ROOT / "tests" / "report" / "fixtures").glob("arm-*"))
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 512}


def _run_dir(tmp: Path) -> Path:
    """A finished run as select-checkpoint reads it: 12 steps of metrics, an export every 5."""
    run = tmp / "run"
    run.mkdir()
    lines = [json.dumps({"global_step": s, "reward/avg_raw_reward": s / 12}) for s in range(1, 13)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for step in (5, 10):
        (run / "exports" / f"global_step_{step}").mkdir(parents=True)
    return run


def _arms(tmp: Path) -> list[str]:
    """Two synthetic arms evaluated on the same 4 tasks with the same seeds (tests/report/_synthetic.py)."""
    from report._synthetic import make_run

    passes = {f"t{i}": [i % 2 == 0, True] for i in range(4)}
    return [str(make_run(tmp / name, {"seed": 0, "arm": name}, [0.5] * 3, {3: passes})) for name in ("a", "b")]


def _rollouts(tmp: Path) -> Path:
    """A run folder with one step's rollout records (what the task health ledger reads)."""
    run = _run_dir(tmp)
    (run / "rollouts").mkdir()
    (run / "rollouts" / "step_1.jsonl").write_text("".join(
        json.dumps({"global_step": 1, "epoch": 0, "task": t, "sample_index": i, "passed": t == "easy",
                    "failure_class": "none", "outcome": "passed" if t == "easy" else "failed"}) + "\n"
        for t in ("easy", "hard") for i in range(2)))
    return run


def _model(tmp: Path) -> Path:
    folder = tmp / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    return folder


MINE_PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "mine_project"


# command -> (argv builder on a tmp dir, exit codes it may end with, a key or type the JSON must have)
CASES = {
    "tasks list": (lambda t: ["tasks", "list", str(FIXTURE_TASKS)], {0}, list),
    "tasks import humaneval": (lambda t: ["tasks", "import", "humaneval", str(t / "he"), "--limit", "2"], {0}, "tasks"),
    "tasks generate pymethods": (lambda t: ["tasks", "generate", "pymethods", str(t / "pm"), "--tiers", "1", "--count",
                                            "2", "--heldout-count", "1"], {0}, "splits"),
    "tasks mine": (lambda t: ["tasks", "mine", str(MINE_PROJECT), str(t / "mined"), "--no-prove", "--limit", "1"],
                   {0}, "kept"),
    "sandbox engines": (lambda t: ["sandbox", "engines", "--engine", f"unix://{t}/no-docker.sock"], {3}, list),
    "sandbox gc": (lambda t: ["sandbox", "gc"], {0}, list),  # dead runs' leftovers only: live runs are kept
    "tasks validate": (lambda t: ["tasks", "validate", str(FIXTURE_TASKS)], {0}, "valid"),
    "select-checkpoint": (lambda t: ["select-checkpoint", str(_run_dir(t))], {0}, "chosen"),
    "compare": (lambda t: ["compare", *_arms(t)], {0}, "verdicts"),
    "tasks health": (lambda t: ["tasks", "health", str(_rollouts(t)), "--last-groups", "1"], {0}, "tasks"),
    "report": (lambda t: ["report", *map(str, ARMS), "--out", str(t / "r.html")], {0}, "arms"),
    "train": (lambda t: ["train", str(DEMO_YAML), "--dry-run", "-o", str(t / "run"), "--set",
                         f"data.tasks={FIXTURE_TASKS}", "--set", "data.names=null", "--set",
                         "loop.train_batch_size=1", "--set", f"model.path={_model(t)}"], {0}, "plan"),
    "sandbox-test": (lambda t: ["sandbox-test", str(FIXTURE_TASKS / "add-two"), "-c", "2"], {0}, list),
    "eval": (lambda t: ["eval", str(FIXTURE_TASKS), "--limit", "1", "--protocol", "single-turn",
                        "--max-new-tokens", "4", "-c", "1", "--threads", "1", "-o", str(t / "eval")], {0}, "pass@1"),
}
DOCKER = {"train", "sandbox-test", "eval", "sandbox gc", "tasks mine"}  # the dry-run's preflight asks the engine; the others run sandboxes


def _json_commands() -> set[str]:
    found = set()

    def walk(group, prefix: str = "") -> None:  # noqa: ANN001 - a click group
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                walk(command, f"{prefix}{name} ")
            elif any("--json" in p.opts for p in command.params):
                found.add(f"{prefix}{name}")

    walk(typer.main.get_command(app))
    return found


def test_every_command_with_json_has_a_case_here():
    assert _json_commands() == set(CASES)


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.docker] if n in DOCKER else [])
                                  for n in sorted(CASES)])
def test_json_dash_puts_one_json_document_on_stdout(name, tmp_path):
    argv, codes, expect = CASES[name]
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", *argv(tmp_path), "--json", "-"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in codes, proc.stderr[-2000:]
    payload = json.loads(proc.stdout)  # nothing but the JSON on stdout
    assert isinstance(payload, expect) if isinstance(expect, type) else expect in payload


@pytest.mark.parametrize("argv", [["tasks", "list", str(FIXTURE_TASKS)],
                                  ["sandbox-test", str(FIXTURE_TASKS)],
                                  ["select-checkpoint", "no-such-run"]])
def test_a_json_path_that_is_a_folder_fails_at_parse_time(argv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", *argv, "--json", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "--json" in lines[0] and "is a folder" in lines[0] and proc.stdout == ""


@pytest.mark.parametrize("where", ["/proc/result.json", "/sys/result.json"])
def test_a_json_path_where_nothing_can_be_created_fails_at_parse_time(where):
    """Root passes ``os.access`` in /proc and /sys, yet no file can be created there: the
    ``--json`` check creates (and removes) a probe file, so the run is refused before it starts."""
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", "tasks", "list", str(FIXTURE_TASKS), "--json", where],
                          capture_output=True, text=True, timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "not a writable folder" in lines[0], proc.stderr
    assert proc.stdout == ""
