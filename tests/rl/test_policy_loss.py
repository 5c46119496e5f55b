"""PPO clip (asymmetric), dual clip, k3 KL and entropy on hand-set ratios (docs/algorithms.md, Policy loss)."""

import math

import pytest
import torch

from swerl.rl.policy_loss import dual_clip, entropy_from_logits, log_ratio, masked_fraction, regular

EPS_LOW, EPS_HIGH, C = 0.2, 0.05, 3.0


def _case(ratio: float, adv: float):
    old = torch.tensor([[-1.0]])
    logp = (old + math.log(ratio)).requires_grad_(True)
    return logp, old, torch.tensor([adv])


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "clipped", "grad"),
    [
        (1.0, 2.0, -2.0, False, -2.0),  # r = 1: REINFORCE, dl/dlogp = -A
        (1.5, 2.0, -1.05 * 2.0, True, 0.0),  # A > 0, r above 1 + eps_high: clipped, no gradient
        (1.03, 2.0, -1.03 * 2.0, False, -1.03 * 2.0),  # inside the asymmetric range
        (0.5, 2.0, -0.5 * 2.0, False, -0.5 * 2.0),  # A > 0, r low: unclipped (pessimistic min)
        (0.5, -2.0, 0.8 * 2.0, True, 0.0),  # A < 0, r below 1 - eps_low: clipped
        (1.5, -2.0, 1.5 * 2.0, False, 1.5 * 2.0),  # A < 0, r high: unclipped
        (0.9, -2.0, 0.9 * 2.0, False, 0.9 * 2.0),
    ],
)
def test_regular_clip_branches_for_both_signs(ratio, adv, loss, clipped, grad):
    logp, old, a = _case(ratio, adv)
    out = regular(logp, old, a, EPS_LOW, EPS_HIGH)
    assert float(out.per_token_loss.detach()) == pytest.approx(loss, rel=1e-5)
    assert bool(out.is_clipped) is clipped
    out.per_token_loss.sum().backward()
    assert float(logp.grad) == pytest.approx(grad, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "clipped"),
    [
        (5.0, -2.0, C * 2.0, True),  # dual-clip bound -c*A wins
        (2.5, -2.0, 2.5 * 2.0, False),  # r < c: same as regular
        (5.0, 2.0, -1.05 * 2.0, True),  # A > 0: regular clip only
        (0.5, -2.0, 0.8 * 2.0, True),
    ],
)
def test_dual_clip_bounds_negative_advantage_loss(ratio, adv, loss, clipped):
    logp, old, a = _case(ratio, adv)
    out = dual_clip(logp, old, a, EPS_LOW, EPS_HIGH, C)
    assert float(out.per_token_loss.detach()) == pytest.approx(loss, rel=1e-5)
    assert bool(out.is_clipped) is clipped
    out.per_token_loss.sum().backward()
    if ratio == 5.0 and adv < 0:
        assert float(logp.grad) == 0.0


def test_log_ratio_is_clamped_and_loss_finite_in_fp32():
    logp = torch.tensor([[-2.0, -200.0]], dtype=torch.bfloat16, requires_grad=True)
    old = torch.tensor([[-91.0, -1.0]])
    assert log_ratio(logp, old).tolist() == [[20.0, -20.0]]
    out = regular(logp, old, torch.tensor([-1.0]), EPS_LOW, EPS_HIGH)
    assert out.per_token_loss.dtype == torch.float32
    assert torch.isfinite(out.per_token_loss).all()
    out.per_token_loss.sum().backward()
    assert torch.isfinite(logp.grad).all()


def test_per_token_advantages_broadcast_like_per_row():
    logp = torch.randn(2, 3)
    old = logp + 0.3
    a = torch.tensor([1.0, -2.0])
    row = regular(logp, old, a, EPS_LOW, EPS_HIGH).per_token_loss
    tok = regular(logp, old, a[:, None].expand(2, 3), EPS_LOW, EPS_HIGH).per_token_loss
    assert torch.equal(row, tok)


def test_entropy_from_logits_matches_definition():
    logits = torch.randn(2, 3, 5)
    p = torch.softmax(logits, -1)
    assert torch.allclose(entropy_from_logits(logits), -(p * p.log()).sum(-1), atol=1e-6)
    assert float(entropy_from_logits(torch.zeros(1, 1, 4))) == pytest.approx(math.log(4))


def test_masked_fraction_ignores_padding():
    flags = torch.tensor([[True, True, False, True]])
    mask = torch.tensor([[True, True, False, False]])
    assert masked_fraction(flags, mask) == 1.0
    assert masked_fraction(flags, torch.zeros_like(mask)) == 0.0
