"""The task health ledger on sample records with known outcomes: counts, per-epoch solve rates,
first/last solved step, each flag and its threshold, blame read when present, and the patch file
that data.exclude reads."""

from __future__ import annotations

import pytest

from swerl.tasks.exclude import excluded, read_exclude_file, write_exclude_file
from swerl.task_health import HealthRules, TaskLedger


def _rec(task: str, passed: bool = False, outcome: str | None = None, failure_class: str = "none", **extra) -> dict:
    return {"task": task, "passed": passed, "outcome": outcome or ("passed" if passed else "failed"),
            "failure_class": failure_class, **extra}


def _ledger() -> TaskLedger:
    ledger = TaskLedger()
    for step, epoch in ((1, 0), (2, 0), (3, 1), (4, 1)):
        ledger.observe(step, epoch, [
            _rec("easy", True), _rec("easy", True),
            _rec("hard"), _rec("hard"),
            _rec("late", step >= 3), _rec("late"),
            _rec("flaky", True), _rec("flaky", outcome="daemon_error", failure_class="mask"),
            _rec("badverifier", outcome="no_reward_file", failure_class="mask"), _rec("badverifier", True),
            # masked by the policy's own doing (blame: attempt) is not the infrastructure's fault
            _rec("selfinflicted", outcome="disk_limit", failure_class="mask", blame="attempt"), _rec("selfinflicted", True),
        ])
    return ledger


def test_counts_rates_and_solved_steps():
    rows = {r.task: r for r in _ledger().flag(HealthRules())}
    late = rows["late"]
    assert (late.attempts, late.judged, late.passed, late.masked) == (8, 8, 2, 0)
    assert late.solve_rate_by_epoch() == {0: 0.0, 1: 0.5}
    assert (late.first_solved_step, late.last_solved_step) == (3, 4)
    assert [g for g in late.groups] == [[1, 2, 0], [2, 2, 0], [3, 2, 1], [4, 2, 1]]
    assert rows["flaky"].masked == 4 and rows["flaky"].judged == 4 and rows["flaky"].outcomes == {
        "passed": 4, "daemon_error": 4}


def test_flags_and_their_thresholds():
    rows = {r.task: r for r in _ledger().flag(HealthRules())}
    assert set(rows["easy"].flags) == {"saturated"} and "steps 3, 4" in rows["easy"].flags["saturated"]
    assert set(rows["hard"].flags) == {"never_solved"}
    assert set(rows["flaky"].flags) == {"infra_flaky", "saturated"}  # its judged samples all passed
    assert "verifier_suspect" in rows["badverifier"].flags and "infra_flaky" not in rows["badverifier"].flags
    assert "infra_flaky" not in rows["selfinflicted"].flags  # blame: attempt
    assert not rows["late"].flags
    loose = {r.task: r for r in _ledger().flag(HealthRules(infra_fraction=0.5, verifier_fraction=0.5))}
    assert "infra_flaky" not in loose["flaky"].flags and "verifier_suspect" not in loose["badverifier"].flags
    one_group = TaskLedger()
    one_group.observe(1, 0, [_rec("new"), _rec("new")])
    assert not one_group.flag(HealthRules())[0].flags  # K = 2 groups needed to call it never solved
    assert set(one_group.flag(HealthRules(last_groups=1))[0].flags) == {"never_solved"}


def test_state_round_trips_through_json():
    import json

    ledger = _ledger()
    restored = TaskLedger()
    restored.load_state_dict(json.loads(json.dumps(ledger.state_dict())))
    assert [(r.task, r.flags) for r in restored.flag(HealthRules())] == [(r.task, r.flags) for r in ledger.flag(HealthRules())]
    assert restored.tasks["late"].solve_rate_by_epoch() == {0: 0.0, 1: 0.5}


def test_the_patch_file_is_what_data_exclude_reads(tmp_path):
    path = write_exclude_file(tmp_path / "x.yaml", {"easy": "saturated: every sample passed", "hard": "never_solved: 0"},
                              "swerl tasks health runs/x\nTrain without them: ...")
    assert path.read_text().startswith("# swerl tasks health runs/x\n# Train without them")
    assert read_exclude_file(path) == {"easy": "saturated: every sample passed", "hard": "never_solved: 0"}
    assert excluded(["easy", "late", "hard"], str(path)) == {"easy": "saturated: every sample passed",
                                                            "hard": "never_solved: 0"}
    assert excluded(["easy", "late", "hard"], ["h*"]) == {"hard": "matches h*"}


def _fixed_task(root, name: str, reward: str):
    """A copy of a learning task whose verifier always writes ``reward`` (always / never solved)."""
    import shutil

    from ._support import LEARNING_TASKS

    folder = root / name
    shutil.copytree(LEARNING_TASKS / "magic-a", folder)
    (folder / "tests" / "test.sh").write_text(f"#!/bin/bash\nmkdir -p /logs/verifier\necho {reward} > /logs/verifier/reward.txt\n")
    return folder


@pytest.mark.docker
def test_a_real_run_flags_the_saturated_and_the_never_solved_task(tmp_path, tiny_model_dir):
    """4 steps on two always-solved and two never-solved tasks (2 per step, 2 samples each), with
    data.quarantine dropping never-solved tasks after epoch 0: the rollout records, the quarantine
    in the step's record, then `swerl tasks health` flags and the patch data.exclude reads."""
    import json

    import yaml
    from typer.testing import CliRunner

    from swerl.cli import app
    from swerl.tasks.exclude import load_without_excluded
    from swerl.trainer.config import TrainConfig
    from swerl.trainer.loop import train

    from ._support import tiny_run_config

    tasks = tmp_path / "tasks"
    for name, reward in (("always-1", 1), ("always-2", 1), ("never-1", 0), ("never-2", 0)):
        _fixed_task(tasks, name, str(reward))
    cfg = TrainConfig.model_validate(tiny_run_config(
        tiny_model_dir, data={"tasks": str(tasks), "quarantine": {"last_groups": 1, "flags": ["never_solved"]}},
        loop={"train_batch_size": 2, "epochs": 4, "max_steps": 4, "micro_batch_size": 4},
        checkpointing={"ckpt_interval": 0, "hf_save_interval": 0, "save_final": False}))
    run = tmp_path / "run"
    records = train(cfg, run).records
    assert records[1]["quarantine/dropped"] == 2.0 and records[1]["quarantine/never_solved/never-1"] == 3.0
    steps = {s: [json.loads(line) for line in (run / "rollouts" / f"step_{s}.jsonl").read_text().splitlines()]
             for s in range(1, 5)}
    assert all(r["task"].startswith("always") for s in (3, 4) for r in steps[s])  # never-* quarantined
    assert {r["task"] for s in (1, 2) for r in steps[s]} == {"always-1", "always-2", "never-1", "never-2"}

    result = CliRunner().invoke(app, ["tasks", "health", str(run), "--json", str(tmp_path / "h.json")])
    assert result.exit_code == 0, result.output
    rows = {r["task"]: r for r in json.loads((tmp_path / "h.json").read_text())["tasks"]}
    assert set(rows["always-1"]["flags"]) == {"saturated"} and rows["always-1"]["passed"] == 6
    assert rows["always-1"]["first_solved_step"] in (1, 2) and rows["always-1"]["last_solved_step"] == 4
    assert not rows["never-1"]["flags"]  # one group only: K = 2 groups are needed to call it never solved
    patch = run / "task_health.exclude.yaml"
    assert set(yaml.safe_load(patch.read_text())) == {"always-1", "always-2"}
    kept, dropped = load_without_excluded(str(tasks), limit=None, names=None, exclude=str(patch))
    assert [t.name for t in kept] == ["never-1", "never-2"] and set(dropped) == {"always-1", "always-2"}

    # --recheck runs the flagged tasks' oracle (it writes MAGIC: the never-tasks' verifier still
    # says 0) and a null attempt (the always-tasks' verifier says 1): both are the verifier's fault.
    result = CliRunner().invoke(app, ["tasks", "health", str(run), "--last-groups", "1", "--recheck", "--patch",
                                      str(tmp_path / "k1.yaml")])
    assert result.exit_code == 0, result.output
    flags = yaml.safe_load((tmp_path / "k1.yaml").read_text())
    assert flags["always-2"].startswith("saturated") and flags["never-2"].startswith("never_solved")
    assert all("verifier_suspect: re-check" in flags[name] for name in flags) and len(flags) == 4
    assert "4 tasks over steps 1-4: 4 flagged (saturated 2, never_solved 2, verifier_suspect 4)" in result.output
