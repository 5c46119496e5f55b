"""``algorithm.dynamic_sampling`` in the whole loop, on real parts: the tiny model, learning tasks in
real Docker sandboxes scored by their real verifiers. ``flat-*`` tasks are copies of a learning task
whose verifier gives every episode 0.5, so their groups never carry signal.

The step fills up with groups with signal from the next prompts of the data order, never spends more
than ``max_extra_rounds`` rounds (a task set with no signal at all ends every step at the bound, and
says so), keeps the staleness bound with the rollout pipeline, and a resumed run reproduces the
uninterrupted one bit for bit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from swerl.tasks.load import load_tasks
from swerl.trainer.loop import train
from swerl.trainer.persistence import checkpoint as ckpt
from swerl.trainer.rollouts.sampler import PromptSampler
from swerl.trainer.config import TrainConfig

from ..test_loop import TASKS, records, without_timing
from .test_pipeline import dumped

pytestmark = pytest.mark.docker

N = 4  # samples per prompt
MAGIC = ["magic-a", "magic-b", "magic-c", "magic-d"]
FLAT_VERIFIER = "#!/bin/bash\nmkdir -p /logs/verifier\necho 0.5 > /logs/verifier/reward.txt\n"


def task_set(root: Path, magic: list[str], flat: int) -> Path:
    """The learning tasks ``magic`` and ``flat`` copies of ``magic-a`` whose verifier always gives 0.5."""
    for name in magic:
        shutil.copytree(TASKS / name, root / name)
    for i in range(flat):
        shutil.copytree(TASKS / "magic-a", root / f"flat-{i}")
        (root / f"flat-{i}" / "tests" / "test.sh").write_text(FLAT_VERIFIER)
    return root


def ds_config(model_dir: Path, tasks: Path, rounds: int, n: int = N, **loop) -> TrainConfig:
    """Seed 4, with the four learning tasks and two flat ones (measured): step 1 drops one group and
    refills in one extra round, step 2 drops both groups of its round 0 and refills in one."""
    return TrainConfig.model_validate({
        "model": {"path": str(model_dir), "device": "cpu"},
        "data": {"tasks": str(tasks)},
        "agent": {"protocol": "single-turn", "temperature": 1.0,
                  "limits": {"max_new_tokens_per_turn": 6, "context_window_tokens": 256, "max_turns": 1}},
        "sandbox": {"concurrency": 4},
        "generator": {"max_batch_size": 1},  # one prompt per forward: samples independent of batching
        "algorithm": {"n_samples_per_prompt": n, "min_group_size": 2, "loss_reduction": "token_mean",
                      "dynamic_sampling": {"enabled": True, "max_extra_rounds": rounds}},
        "optimizer": {"lr": 1e-2},
        "loop": {"train_batch_size": 2, "epochs": 10, "max_steps": 2, "micro_batch_size": 4, **loop},
        "checkpointing": {"ckpt_interval": 1, "hf_save_interval": 0, "keep_last": 5},
        "logging": {"dump_trajectories": True},
        "seed": 4,
    })


def generated(run_dir: Path, step: int) -> list[dict]:
    """Every episode step ``step`` collected (its sample records), in the order drawn."""
    return [json.loads(line) for line in (run_dir / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]


def groups(rows: list[dict], task_key: str) -> list[tuple[str, list[float]]]:
    """(task, rewards) per group, in order."""
    out: dict[str, tuple[str, list[float]]] = {}
    for row in rows:
        out.setdefault(row["group_id"], (row[task_key], []))[1].append(row["reward"])
    return list(out.values())


def check_steps(run_dir: Path, cfg: TrainConfig, rounds: int) -> list[dict]:
    """Per step: the trained groups all have signal, the dropped ones none; the counts add up; the
    prompts drawn over the run are the sampler's order, contiguous. Returns the records."""
    names = [t.name for t in load_tasks(cfg.data.tasks)]
    sampler = PromptSampler(len(names), cfg.loop.train_batch_size, cfg.data_seed, cfg.data.shuffle)
    stream = [names[i] for _ in range(cfg.loop.max_steps) for i in sampler.next_batch()[1] + sampler.next_prompts(8)]
    drawn: list[str] = []
    recs = records(run_dir)
    for rec in recs:
        step = rec["global_step"]
        made, trained = groups(generated(run_dir, step), "task"), groups(dumped(run_dir)[step], "task_name")
        kept, dropped = rec["dynamic_sampling/groups_kept"], rec["dynamic_sampling/groups_dropped"]
        assert rec["dynamic_sampling/prompts_drawn"] == kept + dropped == len(made), rec
        assert 0 <= rec["dynamic_sampling/rounds"] <= rounds
        assert rec["dynamic_sampling/batch_filled"] == float(kept == cfg.loop.train_batch_size)
        assert [len(set(r)) > 1 for _, r in made].count(True) == kept  # every group with signal is kept
        if kept:
            assert len(trained) == kept and all(len(set(r)) > 1 for _, r in trained)
        assert rec["reward/num_trajectories"] == len(made) * cfg.n_samples  # reward/* over every episode generated
        everything = [r for _, rs in made for r in rs]
        assert rec["reward/avg_raw_reward"] == pytest.approx(sum(everything) / len(everything))
        drawn += [task for task, _ in made]
    assert drawn == stream[: len(drawn)]
    return recs


def test_steps_fill_from_the_next_prompts_and_resume_bit_for_bit(tmp_path, tiny_model_dir):
    cfg = ds_config(tiny_model_dir, task_set(tmp_path / "tasks", MAGIC, 2), 6)
    full = tmp_path / "full"
    train(cfg, full)
    recs = check_steps(full, cfg, 6)
    assert all(r["dynamic_sampling/batch_filled"] == 1.0 for r in recs)
    assert recs[1]["dynamic_sampling/rounds"] >= 1  # the step after the crash below refills
    assert all(not name.startswith("flat") for rows in dumped(full).values() for name in {r["task_name"] for r in rows})

    # Crash after step 1, resume: step 2 draws the same prompts in every round, samples the same
    # episodes and trains the same weights.
    crashed = tmp_path / "crashed"
    shutil.copytree(full, crashed)
    shutil.rmtree(crashed / "checkpoints" / "global_step_2")
    (crashed / "checkpoints" / "latest_ckpt_global_step.txt").write_text("1\n")
    train(cfg, crashed, resume="latest")
    assert without_timing(records(crashed)[1]) == without_timing(recs[1])
    untimed = lambda rows: [{k: v for k, v in r.items() if k != "timings_s"} for r in rows]  # noqa: E731
    assert untimed(dumped(crashed)[2]) == untimed(dumped(full)[2])
    assert untimed(generated(crashed, 2)) == untimed(generated(full, 2))
    a = ckpt.read_model_state(full / "checkpoints" / "global_step_2")
    b = ckpt.read_model_state(crashed / "checkpoints" / "global_step_2")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_without_any_signal_each_step_ends_at_the_bound_and_says_so(tmp_path, tiny_model_dir, caplog):
    cfg = ds_config(tiny_model_dir, task_set(tmp_path / "tasks", [], 4), 2, n=2, max_steps=1)
    events = []
    with caplog.at_level("INFO", logger="swerl.trainer.loop"):
        result = train(cfg, tmp_path / "run", on_event=lambda ev: ev.kind == "rollout" and events.append(ev.data))
    # The step's episode count goes on across the extra rounds (new-user finding: it restarted at 0/4)
    done = [ev.done for ev in events if ev.kind == "finished"]
    assert done == list(range(1, 13)) and max(ev.total for ev in events) == 12, done
    # the step's log line says what it trained on, of what it drew (new-user finding: only the bar did)
    assert any("| kept 0 of 6 groups with signal (+2 rounds)" in r.getMessage() for r in caplog.records), caplog.text[-2000:]
    assert any("(dynamic sampling: up to 2 extra rounds per step" in r.getMessage() for r in caplog.records
               if r.getMessage().startswith("plan: ")), caplog.text[:2000]  # new-user finding: the plan left them out
    assert result.steps_trained == 1
    (rec,) = check_steps(tmp_path / "run", cfg, 2)
    assert (rec["dynamic_sampling/rounds"], rec["dynamic_sampling/batch_filled"]) == (2.0, 0.0)
    assert (rec["dynamic_sampling/groups_kept"], rec["dynamic_sampling/groups_dropped"]) == (0.0, 6.0)
    # The step still trains (its round-0 groups, all with A = 0): the LR schedule stays as planned.
    rows = dumped(tmp_path / "run")[1]
    assert len(rows) == 2 * 2 and all(r["advantage"] == 0.0 for r in rows)
    assert rec["policy/optimizer_steps"] == 1.0


def test_with_the_pipeline_ahead_extra_rounds_keep_the_staleness_bound(tmp_path, tiny_model_dir):
    cfg = ds_config(tiny_model_dir, task_set(tmp_path / "tasks", MAGIC, 2), 6, max_staleness_steps=1)
    train(cfg, tmp_path / "run")
    recs = check_steps(tmp_path / "run", cfg, 6)
    assert recs[1]["dynamic_sampling/rounds"] >= 1
    for step, rows in dumped(tmp_path / "run").items():
        assert max(step - 1 - min(r["turn_weight_versions"]) for r in rows if r["turn_weight_versions"]) <= 1
