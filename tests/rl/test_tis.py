"""Truncated importance sampling weights (docs/algorithms.md, Truncated importance sampling)."""

import math

import pytest
import torch

from swerl.rl.policy_loss import regular
from swerl.rl.reductions import denominator_parts, reduce_microbatch
from swerl.rl.tis import tis_weights


def test_weight_is_capped_ratio_with_no_lower_bound():
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    mu = torch.tensor([[-1.0, -1.5, -3.0, -1.0 + math.log(100.0)]])
    out = tis_weights(old, mu, torch.tensor([True]), torch.ones(1, 4, dtype=torch.bool), cap=2.0)
    expected = [1.0, math.exp(0.5), 2.0, 0.01]
    assert out.weights[0].tolist() == pytest.approx(expected, rel=1e-5)
    assert out.is_capped[0].tolist() == [False, False, True, False]
    assert out.metrics["tis/imp_ratio_capped_fraction"] == 0.25
    assert out.metrics["tis/imp_ratio_mean"] == pytest.approx(sum(expected) / 4, rel=1e-5)
    assert out.metrics["tis/log_ratio_abs_mean"] == pytest.approx((0 + 0.5 + 2.0 + math.log(100)) / 4, rel=1e-5)


def test_no_gradient_flows_through_the_weight():
    old = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    mu = torch.tensor([[-1.5, -2.5]], requires_grad=True)
    out = tis_weights(old, mu, torch.tensor([True]), torch.ones(1, 2, dtype=torch.bool), cap=2.0)
    assert not out.weights.requires_grad
    logp = old.detach().clone().requires_grad_(True)
    (out.weights * regular(logp, old.detach(), torch.tensor([1.0]), 0.2, 0.05).per_token_loss).sum().backward()
    assert old.grad is None and mu.grad is None
    assert logp.grad[0].tolist() == pytest.approx([-math.exp(0.5)] * 2, rel=1e-5)  # w * (-A), w=e^0.5


def test_trainer_minus_two_vs_rollout_minus_ninety_one_stays_finite():
    old = torch.tensor([[-2.0, -2.0]])
    mu = torch.tensor([[-91.0, -2.0]])
    out = tis_weights(old, mu, torch.tensor([True]), torch.ones(1, 2, dtype=torch.bool), cap=2.0)
    assert out.weights.tolist() == [[2.0, 1.0]]
    assert out.log_ratio[0, 0] == 20.0
    logp = old.clone().requires_grad_(True)
    mask = torch.ones(1, 2, dtype=torch.bool)
    per_token = out.weights * regular(logp, old, torch.tensor([-1.0]), 0.2, 0.05).per_token_loss
    loss = reduce_microbatch(per_token, mask, denominator_parts(mask, torch.tensor([-1.0])), "token_mean")
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert logp.grad[0].tolist() == pytest.approx([1.0, 0.5])  # (w * A * -1) / 2 tokens, w = 2 and 1


def test_rows_without_rollout_logprobs_get_weight_one_and_are_counted():
    old = torch.tensor([[-1.0, -2.0], [-1.0, -2.0], [-0.5, -0.5]])
    mu = torch.tensor([[0.0, 0.0], [float("nan"), float("inf")], [-1.0, -1.0]])  # zero-filled / garbage
    has = torch.tensor([False, False, True])
    out = tis_weights(old, mu, has, torch.ones(3, 2, dtype=torch.bool), cap=2.0)
    assert out.weights[:2].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert out.weights[2].tolist() == pytest.approx([math.exp(0.5)] * 2)
    assert torch.isfinite(out.weights).all() and torch.isfinite(out.log_ratio).all()
    assert out.metrics["tis/rows_without_logprobs"] == 2


def test_metrics_ignore_padding_tokens():
    old = torch.tensor([[-1.0, -1.0]])
    mu = torch.tensor([[-1.0, -9.0]])
    out = tis_weights(old, mu, torch.tensor([True]), torch.tensor([[True, False]]), cap=2.0)
    assert out.metrics["tis/imp_ratio_capped_fraction"] == 0.0
    assert out.metrics["tis/imp_ratio_mean"] == 1.0


@pytest.mark.parametrize("cap", [0.0, -1.0])
def test_non_positive_cap_is_rejected(cap):
    with pytest.raises(ValueError, match="cap"):
        tis_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([True]), torch.ones(1, 1), cap)
