"""Step-level counts of the policy update: every row of the training step, summed, not averaged."""

from __future__ import annotations

import torch

from swerl.rl.config import AlgorithmConfig
from swerl.trainer.step.batch import row_from_trajectory
from swerl.trainer.distributed import DistInfo
from swerl.trainer.step.update import UpdateSettings, train_on_batch

from .._support import build_tiny_model, make_trajectories


def test_rows_without_logprobs_counts_every_row_of_the_step():
    # 8 rows in 2 optimizer steps; 3 have no rollout log-probs, 2 of them with A = 0 (not
    # forwarded). The count is 3: all rows of the step, not the forwarded ones, not a mean.
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2, use_tis=True)
    trajs = make_trajectories(num_groups=2, group_size=4, seed=1)
    advantages = [0.5, -0.5, 0.0, 0.0, 0.5, -0.5, 0.0, 0.0]
    without = {1, 2, 6}
    rows = [row_from_trajectory(t.model_copy(update={"rollout_logprobs": None}) if i in without else t, a)
            for i, (t, a) in enumerate(zip(trajs, advantages))]
    model = build_tiny_model(16, 0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=4, micro_batch_size=2, grad_clip=None)
    metrics = train_on_batch(model, opt, sched, rows, algo, s, DistInfo())
    assert metrics["policy/optimizer_steps"] == 2
    assert metrics["tis/rows_without_logprobs"] == 3


def test_token_means_are_left_out_when_no_row_was_forwarded():
    # Every A = 0: nothing is forwarded, so the correction's token means are undefined (not 0).
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2)
    rows = [row_from_trajectory(t, 0.0) for t in make_trajectories(num_groups=1, group_size=4, seed=2)]
    model = build_tiny_model(16, 0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=4, micro_batch_size=2, grad_clip=None)
    metrics = train_on_batch(model, opt, sched, rows, algo, s, DistInfo())
    assert "tis/imp_ratio_mean" not in metrics and "tis/ratio_mean" not in metrics
    assert metrics["loss/policy"] == 0.0 and metrics["tis/rows_without_logprobs"] == 0
