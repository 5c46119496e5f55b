"""``kill -9`` of a real ``swerl train`` with the rollout pipeline ahead of the trainer (k = 2),
then ``--resume latest``: every prompt of the plan is trained exactly once, in the plan's steps,
and each step's rollouts respect the staleness bound across the restart."""

from __future__ import annotations

import json
import signal

import pytest

from swerl.tasks.load import load_tasks
from swerl.trainer.rollouts.sampler import PromptSampler

from ..test_loop import records, tiny_config
from .test_pipeline import dumped
from ..persistence.test_resume_kill import KILL_STEP, swerl_train

pytestmark = [pytest.mark.docker, pytest.mark.slow]

K, STEPS = 2, 4


def test_kill_9_with_batches_in_flight_then_resume_trains_every_prompt_once(tmp_path, tiny_model_dir):
    cfg = tiny_config(tiny_model_dir, max_steps=STEPS, max_staleness_steps=K)
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(cfg.to_yaml())
    run = tmp_path / "run"
    assert swerl_train(cfg_path, run, kill_at="after_checkpoint") == -signal.SIGKILL

    # The checkpoint of the kill step saw the producer ahead: batches collected or started, not trained.
    state = json.loads((run / "checkpoints" / f"global_step_{KILL_STEP}" / "trainer_state.json").read_text())
    position = state["pipeline"]
    assert position["max_staleness_steps"] == K
    assert position["buffered_steps"] or position["producing_step"], position
    assert all(step > KILL_STEP for step in [*position["buffered_steps"], position["producing_step"] or KILL_STEP + 1])

    assert swerl_train(cfg_path, run, "--resume", "latest") == 0
    assert [r["global_step"] for r in records(run)] == list(range(1, STEPS + 1))

    # Each step trained exactly the prompts the plan gives it, every sample of each.
    task_names = [task.name for task in load_tasks(cfg.data.tasks)]
    sampler = PromptSampler(len(task_names), cfg.loop.train_batch_size, cfg.data_seed, cfg.data.shuffle)
    rows = dumped(run)
    for step in range(1, STEPS + 1):
        _, indices = sampler.next_batch()
        planned = sorted((task_names[i], s) for i in indices for s in range(cfg.n_samples))
        assert sorted((r["task_name"], r["sample_index"]) for r in rows[step]) == planned, step
        lags = [step - 1 - min(r["turn_weight_versions"]) for r in rows[step] if r["turn_weight_versions"]]
        assert max(lags) <= K
