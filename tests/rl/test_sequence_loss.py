"""GSPO and CISPO against float64 references written from the papers' formulas, through
``compute_policy_loss`` (so the reductions and the rollout corrections compose as for ``regular``)."""

import math

import pytest
import torch

from swerl.rl.config import AlgorithmConfig
from swerl.rl.loss import LossInputs, compute_policy_loss
from swerl.rl.reductions import denominator_parts
from swerl.rl.sequence_loss import cispo, gspo

EPS_LOW, EPS_HIGH = 0.2, 0.05


def _batch(seed: int = 0):
    """Ragged rows: (B, T) log pi (ratios spread around 1, some outside the clip range), log pi_old,
    sampler log mu, advantages of both signs and one of zero, loss mask with an empty row."""
    g = torch.Generator().manual_seed(seed)
    b, t = 5, 9
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3 - 0.1
    new = old + torch.randn(b, t, generator=g, dtype=torch.float64) * 0.15
    mu = old + torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    mask = torch.ones(b, t, dtype=torch.bool)
    for row, length in enumerate([9, 4, 7, 1, 0]):
        mask[row, length:] = False
    adv = torch.tensor([1.5, -0.7, 0.9, -2.0, 1.0], dtype=torch.float64)
    return new, old, mu, mask, adv


def _gspo_reference(new, old, mask, adv, weights=None):
    """Per-row loss -min(s A, clip(s) A), s = exp(mean_t (log pi - log pi_old)), and the sequence_mean
    objective (mean over nonempty rows of the mean over the row's tokens of w_t * l_i), float64."""
    rows = []
    for i in range(new.shape[0]):
        m = mask[i]
        n = int(m.sum())
        if n == 0:
            continue
        s = torch.exp((new[i][m] - old[i][m]).mean())
        l_i = -torch.minimum(s * adv[i], s.clamp(1 - EPS_LOW, 1 + EPS_HIGH) * adv[i])
        w = weights[i][m] if weights is not None else torch.ones(n, dtype=torch.float64)
        rows.append((w * l_i).sum() / n)
    return torch.stack(rows).sum() / len(rows)


def _cispo_reference(new, old, mask, adv):
    """token_mean of -sg(clip(r)) A log pi, float64."""
    r = torch.exp(new - old).detach()
    per_token = -r.clamp(1 - EPS_LOW, 1 + EPS_HIGH) * adv[:, None] * new
    return per_token[mask].sum() / mask.sum()


def _ours(config, new, old, mask, adv, mu=None):
    logp = new.clone().float().requires_grad_(True)
    out = compute_policy_loss(
        config, LossInputs(logp, old.float(), adv.float(), mask, rollout_logprobs=None if mu is None else mu.float()),
        denominator_parts(mask, adv.float()))
    loss, metrics = out.loss, {k: float(v) for k, v in out.metrics.items()}
    loss.backward()
    return loss, logp.grad, metrics


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gspo_matches_float64_sequence_objective_value_and_gradient(seed):
    new, old, _, mask, adv = _batch(seed)
    config = AlgorithmConfig(policy_loss="gspo", use_tis=False, loss_reduction="sequence_mean",
                             eps_clip_low=EPS_LOW, eps_clip_high=EPS_HIGH)
    ref_in = new.clone().requires_grad_(True)
    ref = _gspo_reference(ref_in, old, mask, adv)
    ref.backward()
    loss, grad, metrics = _ours(config, new, old, mask, adv)
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(grad.double()[mask], ref_in.grad[mask], rtol=1e-5, atol=1e-7)
    assert (grad[~mask] == 0).all()
    # the clip fraction counts whole rows (every token of a clipped row)
    s = torch.stack([torch.exp((new[i][mask[i]] - old[i][mask[i]]).mean()) if mask[i].any() else torch.tensor(1.0,
                     dtype=torch.float64) for i in range(len(adv))])
    clipped_rows = ((adv > 0) & (s > 1 + EPS_HIGH)) | ((adv < 0) & (s < 1 - EPS_LOW))
    assert metrics["policy/clip_fraction"] == pytest.approx(
        float((mask.sum(-1) * clipped_rows).sum() / mask.sum()), abs=1e-7)


def test_gspo_clips_a_whole_row_and_is_length_independent():
    # s = exp(mean delta): the same per-token drift gives the same ratio for 2 and 8 tokens.
    old = torch.full((2, 8), -1.0, dtype=torch.float64)
    new = old + math.log(1.5)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[0, 2:] = False
    out = gspo(new.float().requires_grad_(True), old.float(), torch.tensor([2.0, 2.0]), mask, EPS_LOW, EPS_HIGH)
    assert torch.allclose(out.per_token_loss[mask], torch.tensor(-1.05 * 2.0))
    assert out.is_clipped[mask].all()


def test_gspo_composes_with_token_tis_weights():
    # GSPO-token with TIS: each token's loss l_i is weighted by its w_t = min(pi_old / mu, 2), so
    # the objective is mean_i sum_t w_t l_i / n_i and token t's gradient -(w_t / n_i / B) A_i s_i
    # (0 on a clipped row): the correction reweights tokens, as for ``regular``.
    new, old, mu, mask, adv = _batch(3)
    config = AlgorithmConfig(policy_loss="gspo", use_tis=True, tis_imp_ratio_cap=2.0, loss_reduction="sequence_mean",
                             eps_clip_low=EPS_LOW, eps_clip_high=EPS_HIGH)
    w = torch.exp(old - mu).clamp(max=2.0)
    value = _gspo_reference(new, old, mask, adv, weights=w)
    rows = int((mask.sum(-1) > 0).sum())
    expected = torch.zeros_like(new)
    for i in range(len(adv)):
        n = int(mask[i].sum())
        if n == 0:
            continue
        s = torch.exp((new[i][mask[i]] - old[i][mask[i]]).mean())
        clipped = (adv[i] > 0 and s > 1 + EPS_HIGH) or (adv[i] < 0 and s < 1 - EPS_LOW)
        expected[i] = 0.0 if clipped else -w[i] / n / rows * adv[i] * s
    loss, grad, metrics = _ours(config, new, old, mask, adv, mu)
    assert float(loss.detach()) == pytest.approx(float(value), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(grad.double()[mask], expected[mask], rtol=1e-5, atol=1e-7)
    assert metrics["tis/imp_ratio_mean"] == pytest.approx(float(w[mask].mean()), rel=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_cispo_matches_float64_reference_and_trains_every_token(seed):
    new, old, _, mask, adv = _batch(seed)
    new = old + (new - old) * 4  # push ratios well outside the clip range
    config = AlgorithmConfig(policy_loss="cispo", use_tis=False, eps_clip_low=EPS_LOW, eps_clip_high=EPS_HIGH)
    ref_in = new.clone().requires_grad_(True)
    ref = _cispo_reference(ref_in, old, mask, adv)
    ref.backward()
    loss, grad, metrics = _ours(config, new, old, mask, adv)
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-5)
    torch.testing.assert_close(grad.double(), ref_in.grad * mask, rtol=1e-5, atol=1e-7)
    # unlike PPO no trainable token loses its gradient to the clip (A != 0 on every nonempty row)
    assert (grad[mask] != 0).all()
    r = torch.exp(new - old)
    outside = (r < 1 - EPS_LOW) | (r > 1 + EPS_HIGH)
    assert 0 < metrics["policy/clip_fraction"] == pytest.approx(float(outside[mask].double().mean()), abs=1e-7)


def test_cispo_weight_carries_no_gradient():
    logp = torch.tensor([[-1.0]], requires_grad=True)
    out = cispo(logp, torch.tensor([[-1.0 - math.log(3.0)]]), torch.tensor([1.0]), EPS_LOW, EPS_HIGH)
    out.per_token_loss.sum().backward()
    # w = clip(3, 0.8, 1.05) = 1.05 detached: dl/dlog pi = -1.05 * A, not -(d/dlog pi)(r log pi)
    assert float(logp.grad) == pytest.approx(-1.05)
    assert bool(out.is_clipped)
