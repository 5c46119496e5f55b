"""``algorithm.agent_failure_tokens``: agent-failure rows (timeouts, parse failures) train on their
tokens with their negative advantage (``train``) or are loss-masked as in the seed run (``mask``)."""

from __future__ import annotations

import pytest
import torch

from swerl.rl.advantages import group_index
from swerl.rl.config import AlgorithmConfig
from swerl.rl.loss import compute_advantages
from swerl.trainer.step.batch import row_from_trajectory
from swerl.trainer.distributed import DistInfo
from swerl.trainer.step.update import UpdateSettings, train_on_batch

from .._support import build_tiny_model, make_trajectories


def _batch():
    trajs = make_trajectories(num_groups=1, group_size=4, seed=6)
    rewards = [1.0, 0.0, 1.0, 0.0]
    trajs = [t.model_copy(update={"reward": r}) for t, r in zip(trajs, rewards)]
    trajs[3] = trajs[3].model_copy(update={"failure_class": "zero", "outcome": "agent_timeout",
                                           "end_reason": "agent_timeout"})
    return trajs


def _rows(trajs, algo):
    rewards = torch.tensor([t.reward for t in trajs])
    adv, _ = compute_advantages(algo, rewards, group_index([t.group_id for t in trajs]), None)
    return [row_from_trajectory(t, float(a), algo.agent_failure_tokens) for t, a in zip(trajs, adv)]


def _train(rows, algo):
    model = build_tiny_model(16, 0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=len(rows), micro_batch_size=2, grad_clip=None)
    return train_on_batch(model, opt, sched, rows, algo, s, DistInfo())


@pytest.mark.parametrize("choice", ["train", "mask"])
def test_agent_failure_rows_train_or_are_masked(choice):
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2, agent_failure_tokens=choice)
    trajs = _batch()
    rows = _rows(trajs, algo)
    assert rows[3].advantage < 0  # reward 0 stays in the baseline either way
    assert rows[3].num_trainable_tokens == (sum(trajs[3].loss_mask) if choice == "train" else 0)
    metrics = _train(rows, algo)
    trained = sum(trajs[i].loss_mask.count(1) for i in range(3)) + (sum(trajs[3].loss_mask) if choice == "train" else 0)
    assert metrics["policy/num_tokens"] == trained


def test_default_trains_agent_failures_and_the_seed_preset_masks_them():
    assert AlgorithmConfig().agent_failure_tokens == "train"
    assert AlgorithmConfig.seed_run().agent_failure_tokens == "mask"


def test_infrastructure_failures_are_masked_whatever_the_choice():
    trajs = _batch()
    infra = trajs[0].model_copy(update={"failure_class": "mask"})
    assert row_from_trajectory(infra, 0.0, "train").num_trainable_tokens == 0
