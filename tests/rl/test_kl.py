"""KL estimators k1 / k2 / k3 against an independent float64 reference (values and gradients),
including log-ratios that overflow exp in fp32 (trainer -2.0 vs reference -91.0)."""

import math

import pytest
import torch

from swerl.rl.kl import KL_ESTIMATORS, kl_k3


def _reference(lp: float, lr: float, name: str) -> tuple[float, float]:
    """(value, d value / d log pi) in float64, straight from Schulman's definitions."""
    d = lr - lp
    if name == "k1":
        return -d, 1.0
    if name == "k2":
        return 0.5 * d * d, -d
    clamped = min(max(d, -20.0), 20.0)
    grad = 1.0 - math.exp(clamped) if -20.0 < d < 20.0 else 0.0  # zero gradient past the clamp
    return math.exp(clamped) - clamped - 1.0, grad


def _batch():
    gen = torch.Generator().manual_seed(11)
    logp = -torch.rand(4, 7, generator=gen, dtype=torch.float64) * 6
    ref = logp + torch.randn(4, 7, generator=gen, dtype=torch.float64) * 1.5
    logp[0, 0], ref[0, 0] = -2.0, -91.0  # exp(89) overflows fp32
    logp[0, 1], ref[0, 1] = -91.0, -2.0
    ref[1, 2] = logp[1, 2]  # equal: every estimator is 0
    return logp, ref


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_estimator_matches_float64_reference_with_its_gradient(name):
    logp64, ref64 = _batch()
    logp = logp64.float().requires_grad_(True)
    value = KL_ESTIMATORS[name](logp, ref64.float())
    value.sum().backward()
    assert value.dtype == torch.float32 and torch.isfinite(value).all() and torch.isfinite(logp.grad).all()
    for i in range(logp64.shape[0]):
        for t in range(logp64.shape[1]):
            want, want_grad = _reference(float(logp64[i, t]), float(ref64[i, t]), name)
            assert float(value.detach()[i, t]) == pytest.approx(want, rel=1e-5, abs=1e-5), (i, t)
            assert float(logp.grad[i, t]) == pytest.approx(want_grad, rel=1e-5, abs=1e-5), (i, t)
    assert float(value.detach()[1, 2]) == 0.0


def test_k2_and_k3_are_non_negative_and_k1_is_not():
    logp, ref = _batch()
    assert (KL_ESTIMATORS["k2"](logp, ref) >= 0).all() and (kl_k3(logp, ref) >= 0).all()
    assert (KL_ESTIMATORS["k1"](logp, ref) < 0).any()


def test_k1_and_k3_estimate_the_true_kl_from_samples():
    # Tokens sampled from pi: the means of k1 and k3 approach KL(pi || ref) of two categoricals.
    gen = torch.Generator().manual_seed(0)
    pi = torch.softmax(torch.randn(6, generator=gen, dtype=torch.float64), -1)
    ref = torch.softmax(torch.randn(6, generator=gen, dtype=torch.float64), -1)
    true_kl = float((pi * (pi / ref).log()).sum())
    idx = torch.multinomial(pi, 200_000, replacement=True, generator=gen)
    lp, lr = pi.log()[idx][None], ref.log()[idx][None]
    for name in ("k1", "k3"):
        assert float(KL_ESTIMATORS[name](lp, lr).double().mean()) == pytest.approx(true_kl, rel=0.02), name
