"""Every rollout correction (token / sequence / geometric, truncate / mask) against an independent
float64 reference on random batches, including log-ratios that overflow exp in fp32 (trainer -2.0
vs sampler -91.0), rows without sampler log-probs and NaN garbage off the loss mask."""

import math

import pytest
import torch

from swerl.rl.config import RolloutCorrectionConfig
from swerl.rl.policy_loss import regular
from swerl.rl.reductions import denominator_parts, reduce_microbatch
from swerl.rl.rollout_correction import CORRECTIONS, correction_term, token_truncate

CASES = [  # (level, mode, high, low)
    ("token", "truncate", 2.0, None),
    ("sequence", "truncate", 3.0, None),
    ("token", "mask", 2.0, 0.5),
    ("sequence", "mask", 8.0, 0.125),
    ("geometric", "mask", 1.5, 0.7),
]


def _reference_weight(deltas: list[float], level: str, mode: str, high: float, low: float) -> list[float]:
    """float64 weights of one row's trainable tokens from their delta = log pi_old - log mu."""
    clamp = lambda x: min(max(x, -20.0), 20.0)  # noqa: E731
    if level == "token":
        out = []
        for d in deltas:
            rho = math.exp(clamp(d))
            if mode == "truncate":
                out.append(min(rho, high))
            else:
                out.append(rho if math.log(low) <= d <= math.log(high) else 0.0)
        return out
    s = sum(clamp(d) for d in deltas)
    if level == "geometric":
        s /= max(len(deltas), 1)
    rho = math.exp(clamp(s))
    if mode == "truncate":
        w = min(rho, high)
    else:
        kept = math.log(low) <= s <= math.log(high)
        w = (1.0 if level == "geometric" else rho) if kept else 0.0
    return [w] * len(deltas)


def _batch(seed: int):
    """8 rows x 12 tokens: ragged masks, mismatch of every size, one row without sampler
    log-probs (NaN), NaN off the mask, one overflow-prone token, one empty row."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(8, 12, generator=gen, dtype=torch.float64) * 5 - 0.1
    scale = torch.tensor([0.02, 0.1, 0.3, 0.6, 1.0, 0.05, 0.2, 0.4], dtype=torch.float64)[:, None]
    mu = old + torch.randn(8, 12, generator=gen, dtype=torch.float64) * scale
    mask = torch.rand(8, 12, generator=gen) > 0.3
    mask[7] = False
    old[2, 3], mu[2, 3], mask[2, 3] = -2.0, -91.0, True
    has = torch.ones(8, dtype=torch.bool)
    has[5] = False
    mu[5] = float("nan")
    mu[~mask] = float("nan")
    return old, mu, has, mask


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("level", "mode", "high", "low"), CASES)
def test_weights_match_the_float64_reference(level, mode, high, low, seed):
    old, mu, has, mask = _batch(seed)
    out = CORRECTIONS[(level, mode)](old.float(), mu.float(), has, mask, high, low if low else 1 / high)
    assert out.weights.dtype == torch.float32 and not out.weights.requires_grad
    on_mask = out.weights[mask]
    assert torch.isfinite(on_mask).all() and (on_mask >= 0).all()
    for i in range(8):
        if not has[i]:
            assert out.weights[i].tolist() == [1.0] * 12 and not out.is_masked[i].any() and not out.is_capped[i].any()
            continue
        cols = [t for t in range(12) if mask[i, t]]
        deltas = [float(old[i, t] - mu[i, t]) for t in cols]
        want = _reference_weight(deltas, level, mode, high, low or 1 / high)
        got = [float(out.weights[i, t]) for t in cols]
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6), (i, got, want)
        masked = [bool(out.is_masked[i, t]) for t in cols]
        assert masked == [mode == "mask" and w == 0.0 for w in want]
        capped = [bool(out.is_capped[i, t]) for t in cols]
        assert capped == [mode == "truncate" and w == high and w < _raw(deltas, level, t_i)
                          for t_i, w in enumerate(want)]
    assert not out.is_masked[~mask].any() and not out.is_capped[~mask].any()
    flagged = out.is_masked if mode == "mask" else out.is_capped
    assert flagged.any() and (mask & has[:, None] & ~flagged).any()  # the case is not trivial


def _raw(deltas: list[float], level: str, t_i: int) -> float:
    """rho before the bound, float64, each exponent clamped to [-20, 20]."""
    clamp = lambda x: min(max(x, -20.0), 20.0)  # noqa: E731
    return math.exp(clamp(deltas[t_i] if level == "token" else sum(clamp(d) for d in deltas)))


def test_overflow_token_is_capped_or_masked_and_its_row_rejected():
    old, mu, has, mask = _batch(0)
    trunc = CORRECTIONS[("token", "truncate")](old.float(), mu.float(), has, mask, 2.0, 0.5)
    assert float(trunc.weights[2, 3]) == 2.0 and bool(trunc.is_capped[2, 3])
    icepop = CORRECTIONS[("token", "mask")](old.float(), mu.float(), has, mask, 2.0, 0.5)
    assert float(icepop.weights[2, 3]) == 0.0 and bool(icepop.is_masked[2, 3])
    mis = CORRECTIONS[("sequence", "mask")](old.float(), mu.float(), has, mask, 8.0, 0.125)
    assert (mis.weights[2][mask[2]] == 0).all() and float(mis.log_ratio[2, 3]) == 20.0


def test_a_perfect_match_is_never_corrected():
    old = -torch.rand(3, 5) * 4
    mask = torch.ones(3, 5, dtype=torch.bool)
    has = torch.ones(3, dtype=torch.bool)
    for (level, mode), fn in CORRECTIONS.items():
        out = fn(old, old.clone(), has, mask, 1.0001, 0.9999)
        assert torch.equal(out.weights, torch.ones(3, 5)), (level, mode)
        assert not out.is_masked.any() and not out.is_capped.any()


def test_sequence_level_uses_only_trainable_tokens_of_the_row():
    # Observation tokens (mask False) carry a huge mismatch that must not count.
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    mu = torch.tensor([[-1.5, -50.0, -1.2, -80.0]])
    mask = torch.tensor([[True, False, True, False]])
    out = CORRECTIONS[("sequence", "truncate")](old, mu, torch.tensor([True]), mask, 10.0, 0.1)
    assert float(out.weights[0, 0]) == pytest.approx(math.exp(0.7), rel=1e-6)
    geo = CORRECTIONS[("geometric", "mask")](old, mu, torch.tensor([True]), mask, 1.5, 0.5)
    assert float(geo.log_ratio[0, 0]) == pytest.approx(0.35, rel=1e-6) and float(geo.weights[0, 2]) == 1.0


# Token-level truncation (TIS, the seed recipe's correction): weights and the metrics of its term.

TIS = RolloutCorrectionConfig(level="token", mode="truncate", high=2.0)


def _tis(old, mu, has, mask):
    return token_truncate(old, mu, has, mask, 2.0, 0.5)


def _tis_metrics(old, mu, has, mask):
    """The term's metrics on one micro-batch that is the whole step (n_tok = its trainable tokens)."""
    term = correction_term(TIS, old, mu, has, mask, torch.ones(old.shape[0]), max(float(mask.sum()), 1.0))
    return {k: float(v) for k, v in (term.sums | term.token_means).items()}


def test_tis_weight_is_capped_ratio_with_no_lower_bound():
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    mu = torch.tensor([[-1.0, -1.5, -3.0, -1.0 + math.log(100.0)]])
    has, mask = torch.tensor([True]), torch.ones(1, 4, dtype=torch.bool)
    out = _tis(old, mu, has, mask)
    expected = [1.0, math.exp(0.5), 2.0, 0.01]
    assert out.weights[0].tolist() == pytest.approx(expected, rel=1e-5)
    assert out.is_capped[0].tolist() == [False, False, True, False]
    metrics = _tis_metrics(old, mu, has, mask)
    assert metrics["tis/imp_ratio_capped_fraction"] == 0.25
    assert metrics["tis/imp_ratio_mean"] == pytest.approx(sum(expected) / 4, rel=1e-5)
    assert metrics["tis/log_ratio_abs_mean"] == pytest.approx((0 + 0.5 + 2.0 + math.log(100)) / 4, rel=1e-5)


def test_no_gradient_flows_through_the_tis_weight():
    old = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    mu = torch.tensor([[-1.5, -2.5]], requires_grad=True)
    out = _tis(old, mu, torch.tensor([True]), torch.ones(1, 2, dtype=torch.bool))
    assert not out.weights.requires_grad
    logp = old.detach().clone().requires_grad_(True)
    (out.weights * regular(logp, old.detach(), torch.tensor([1.0]), 0.2, 0.05).per_token_loss).sum().backward()
    assert old.grad is None and mu.grad is None
    assert logp.grad[0].tolist() == pytest.approx([-math.exp(0.5)] * 2, rel=1e-5)  # w * (-A), w=e^0.5


def test_tis_trainer_minus_two_vs_rollout_minus_ninety_one_stays_finite():
    old = torch.tensor([[-2.0, -2.0]])
    mu = torch.tensor([[-91.0, -2.0]])
    out = _tis(old, mu, torch.tensor([True]), torch.ones(1, 2, dtype=torch.bool))
    assert out.weights.tolist() == [[2.0, 1.0]]
    assert out.log_ratio[0, 0] == 20.0
    logp = old.clone().requires_grad_(True)
    mask = torch.ones(1, 2, dtype=torch.bool)
    per_token = out.weights * regular(logp, old, torch.tensor([-1.0]), 0.2, 0.05).per_token_loss
    loss = reduce_microbatch(per_token, mask, denominator_parts(mask, torch.tensor([-1.0])), "token_mean")
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert logp.grad[0].tolist() == pytest.approx([1.0, 0.5])  # (w * A * -1) / 2 tokens, w = 2 and 1


def test_tis_rows_without_rollout_logprobs_get_weight_one_and_are_counted():
    old = torch.tensor([[-1.0, -2.0], [-1.0, -2.0], [-0.5, -0.5]])
    mu = torch.tensor([[0.0, 0.0], [float("nan"), float("inf")], [-1.0, -1.0]])  # zero-filled / garbage
    has, mask = torch.tensor([False, False, True]), torch.ones(3, 2, dtype=torch.bool)
    out = _tis(old, mu, has, mask)
    assert out.weights[:2].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert out.weights[2].tolist() == pytest.approx([math.exp(0.5)] * 2)
    assert torch.isfinite(out.weights).all() and torch.isfinite(out.log_ratio).all()
    assert _tis_metrics(old, mu, has, mask)["tis/rows_without_logprobs"] == 2


def test_tis_metrics_ignore_padding_tokens():
    old = torch.tensor([[-1.0, -1.0]])
    mu = torch.tensor([[-1.0, -9.0]])
    metrics = _tis_metrics(old, mu, torch.tensor([True]), torch.tensor([[True, False]]))
    assert metrics["tis/imp_ratio_capped_fraction"] == 0.0
    assert metrics["tis/imp_ratio_mean"] == 1.0


@pytest.mark.parametrize("cap", [0.0, -1.0])
def test_non_positive_tis_cap_is_rejected(cap):
    with pytest.raises(ValueError, match="cap"):
        token_truncate(torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([True]), torch.ones(1, 1), cap, 0.5)
