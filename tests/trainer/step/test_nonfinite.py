"""The non-finite gradient guard: a NaN/inf gradient skips the optimizer step, is counted, and K
skipped steps in a row stop the run with exit 1."""

from __future__ import annotations

import copy

import pytest
import torch

from swerl.errors import RunFailed
from swerl.rl.config import AlgorithmConfig
from swerl.trainer.step.batch import row_from_trajectory
from swerl.trainer.distributed import DistInfo
from swerl.trainer.step.nonfinite import NonFiniteStreak, skip_counts
from swerl.trainer.step.update import UpdateSettings, train_on_batch

from .._support import build_tiny_model, make_trajectories


def _rows():
    trajs = make_trajectories(num_groups=1, group_size=4, seed=2)
    return [row_from_trajectory(t, a) for t, a in zip(trajs, [0.5, -0.5, 0.5, -0.5])]


def _update(model, rows, rows_per_mini=4):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=rows_per_mini, micro_batch_size=2, grad_clip=0.9)
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2)
    return opt, train_on_batch(model, opt, sched, rows, algo, s, DistInfo())


def _poison_one_gradient_entry(model, times):
    """Make one entry of lm_head's gradient +inf on the first ``times`` backward passes."""
    left = {"n": times}

    def hook(grad):
        if left["n"] <= 0:
            return grad
        left["n"] -= 1
        grad = grad.clone()
        grad[0, 0] = float("inf")
        return grad

    return model.lm_head.weight.register_hook(hook)


def test_one_inf_gradient_skips_the_step_and_leaves_the_weights_finite():
    model = build_tiny_model(16, 0)
    before = copy.deepcopy(model.state_dict())
    _poison_one_gradient_entry(model, times=1)
    opt, metrics = _update(model, _rows(), rows_per_mini=4)
    assert metrics["update/skipped_nonfinite_steps"] == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name  # untouched, AdamW state too
    assert not opt.state


def test_a_finite_step_after_a_skipped_one_still_trains():
    model = build_tiny_model(16, 0)
    before = copy.deepcopy(model.state_dict())
    _poison_one_gradient_entry(model, times=1)  # the first of two optimizer steps
    _, metrics = _update(model, _rows(), rows_per_mini=2)
    assert metrics["policy/optimizer_steps"] == 2
    assert metrics["update/skipped_nonfinite_steps"] == 1 and metrics["update/trailing_nonfinite_steps"] == 0
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert not torch.equal(model.lm_head.weight, before["lm_head.weight"])


def test_skip_counts_fold_flags_in_order():
    assert skip_counts([1.0, 0.0, 1.0, 1.0]) == {"update/skipped_nonfinite_steps": 3.0,
                                                 "update/trailing_nonfinite_steps": 2.0}
    assert skip_counts([1.0, 0.0]) == {"update/skipped_nonfinite_steps": 1.0, "update/trailing_nonfinite_steps": 0.0}


def _step_metrics(flags):
    return {"policy/optimizer_steps": float(len(flags)), **skip_counts(flags)}


def test_k_skipped_steps_in_a_row_stop_the_run_with_exit_1():
    streak = NonFiniteStreak(limit=3)
    streak.observe(1, _step_metrics([1.0]))
    streak.observe(2, _step_metrics([0.0]))  # a good step resets the streak
    streak.observe(3, _step_metrics([0.0, 1.0]))  # trailing 1
    streak.observe(4, _step_metrics([1.0]))  # 2 in a row
    with pytest.raises(RunFailed, match=r"step 5: 3 optimizer steps in a row .*max_consecutive_nonfinite_steps=3") as err:
        streak.observe(5, _step_metrics([1.0]))
    assert err.value.exit_code == 1
