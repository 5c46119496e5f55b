"""Held-out evaluation during training: when it runs, what it reports, and a real run whose
records carry eval/* at the configured interval (select-checkpoint can rank by them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swerl.agent.collect import eval_episode_seed
from swerl.agent.trajectory import Trajectory
from swerl.selection import select_checkpoint
from swerl.trainer.config import TrainConfig
from swerl.trainer.rollouts.evaluation import EvalDuringTrainingConfig, eval_metrics, is_due
from swerl.trainer.loop import train

from .._support import tiny_run_config

TASKS = Path(__file__).resolve().parents[3] / "examples" / "learning_tasks"


def test_eval_is_due_every_interval_and_after_the_last_step():
    cfg = EvalDuringTrainingConfig(tasks="t", interval=3)
    assert [s for s in range(1, 8) if is_due(cfg, s, last_step=7)] == [3, 6, 7]
    assert [s for s in range(1, 8) if is_due(cfg.model_copy(update={"interval": 0}), s, 7)] == [7]


def test_eval_metrics_are_the_eval_commands_figures():
    def traj(task, i, passed):
        return Trajectory(task_name=task, group_id=task, sample_index=i, prompt_ids=[1], outcome="passed" if passed
                          else "failed", reward=1.0 if passed else 0.0)

    trajs = [traj("a", 0, True), traj("a", 1, False), traj("b", 0, False), traj("b", 1, False)]
    m = eval_metrics(trajs, samples=2)
    assert m["eval/pass@1"] == pytest.approx(0.25) and m["eval/pass@2"] == pytest.approx(0.5)
    assert m["eval/reward"] == pytest.approx(0.25) and m["eval/num_tasks"] == 2


@pytest.mark.docker
@pytest.mark.slow
def test_eval_records_appear_at_the_interval(tmp_path, tiny_model_dir):
    cfg = TrainConfig.model_validate(tiny_run_config(
        tiny_model_dir,
        data={"tasks": str(TASKS), "names": ["magic-a", "magic-b"]},
        eval={"tasks": str(TASKS), "names": ["magic-c", "magic-d"], "interval": 2, "samples": 2, "before_train": True},
        loop={"train_batch_size": 2, "epochs": 3, "max_steps": 3, "micro_batch_size": 4},
    ))
    run_dir = tmp_path / "run"
    events = []
    train(cfg, run_dir, on_event=events.append)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in records] == [0, 1, 2, 3]
    evals = [(e.step, e.data) for e in events if e.kind == "phase" and str(e.data).startswith("eval")]
    assert evals == [(0, "eval (before training)"), (2, "eval (held-out)"), (3, "eval (held-out)")]  # the live view's labels
    with_eval = [r["global_step"] for r in records if "eval/pass@1" in r]
    assert with_eval == [0, 2, 3]  # before training, every 2 steps, and after the last
    assert all(r["eval/num_tasks"] == 2 and "eval/pass@2" in r and "eval/reward" in r
               for r in records if "eval/pass@1" in r)
    assert "reward/avg_raw_reward" not in records[0]  # the step-0 record is the eval alone
    sel = select_checkpoint(run_dir, metric="eval/pass@1", interval=1)
    assert [c.step for c in sel.candidates] == [0, 2, 3] and sel.chosen is not None
    # Every sample's record per evaluation: seeds from (eval.seed, task, sample) only, the same at
    # every step (and in any run with that eval.seed), so evaluations pair sample by sample.
    samples = {s: [json.loads(line) for line in (run_dir / "eval" / f"step_{s}.jsonl").read_text().splitlines()]
               for s in (0, 2, 3)}
    seeds = {s: {(r["task"], r["sample_index"]): r["seed"] for r in recs} for s, recs in samples.items()}
    assert seeds[0] == seeds[2] == seeds[3] == {(t, i): eval_episode_seed(0, t, i)
                                               for t in ("magic-c", "magic-d") for i in (0, 1)}
    for s, recs in samples.items():  # no sample masked: pass@1 is the fraction of samples that passed
        assert sum(r["passed"] for r in recs) / len(recs) == pytest.approx(records[s]["eval/pass@1"])
    assert all(r["global_step"] == s for s, recs in samples.items() for r in recs)


def test_the_learning_example_evaluates_on_held_out_tasks():
    from swerl.trainer.config import load_train_config

    cfg = load_train_config(TASKS.parents[0] / "humaneval-smollm2-cpu-learn.yaml")
    assert cfg.eval is not None and cfg.eval.before_train and cfg.loop.max_steps == 30
    assert not set(cfg.eval.names) & set(cfg.data.names)  # held out: no training task is evaluated
