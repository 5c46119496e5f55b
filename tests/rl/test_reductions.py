"""The four loss reductions: formulas by hand, and invariance to micro-batching and gradient
accumulation on a real tiny causal LM with ragged rows (docs/algorithms.md, Loss reductions)."""

import pytest
import torch

from swerl.rl.config import AlgorithmConfig
from swerl.rl.loss import compute_policy_loss
from swerl.rl.reductions import StepDenominators, denominator_parts, dp_loss_scale, reduce_microbatch

from ._tiny import CORRECTION_CASES, correction_config, ragged_batch, tiny_model, token_logprobs

MODES = ["token_mean", "sequence_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum_norm_global"]
L_MAX = 32
def _config(mode: str, policy_loss: str = "regular") -> AlgorithmConfig:
    return AlgorithmConfig(loss_reduction=mode, max_seq_len=L_MAX, policy_loss=policy_loss)


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def batch(model):
    return ragged_batch(model)


def _step(model, batch, config, micro_batches, dtype=None):
    """One optimizer step's backward over the given row partition; returns (loss, grads)."""
    model.zero_grad(set_to_none=True)
    parts = [batch.rows(idx) for idx in micro_batches]
    denominators = sum((denominator_parts(mb.loss_mask, mb.advantages) for mb in parts), StepDenominators.zero())
    total = 0.0
    for mb in parts:
        loss = compute_policy_loss(config, mb.loss_inputs(token_logprobs(model, mb.input_ids, dtype=dtype)),
                                   denominators).loss
        loss.backward()
        total += float(loss.detach())
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return total, grads


def _close(a, b):
    assert a[0] == pytest.approx(b[0], rel=1e-5, abs=1e-8)
    assert torch.allclose(a[1], b[1], rtol=1e-4, atol=1e-7), float((a[1] - b[1]).abs().max())


@pytest.mark.parametrize("policy_loss", ["regular", "dual_clip"])
@pytest.mark.parametrize("mode", MODES)
def test_micro_batch_of_one_equals_whole_batch(model, batch, mode, policy_loss):
    config = _config(mode, policy_loss)
    whole = _step(model, batch, config, [list(range(8))])
    assert whole[1].abs().sum() > 0 and whole[0] != 0.0
    _close(_step(model, batch, config, [[i] for i in range(8)]), whole)


@pytest.mark.parametrize("mode", MODES)
def test_accumulating_four_micro_batches_equals_one_pass(model, batch, mode):
    config = _config(mode)
    whole = _step(model, batch, config, [list(range(8))])
    _close(_step(model, batch, config, [[0, 7], [1, 2, 3], [4], [5, 6]]), whole)


@pytest.mark.parametrize(("correction", "mode", "estimator"), CORRECTION_CASES)
def test_invariances_hold_for_every_correction_with_kl_on(model, batch, mode, correction, estimator):
    """Micro-batches of one and 4-way accumulation equal the whole batch with each rollout
    correction and the KL term on; the correction really engaged (capped or masked tokens)."""
    config = correction_config(mode, correction, estimator, L_MAX)
    whole = _step(model, batch, config, [list(range(8))])
    assert whole[1].abs().sum() > 0
    _close(_step(model, batch, config, [[i] for i in range(8)]), whole)
    _close(_step(model, batch, config, [[0, 7], [1, 2, 3], [4], [5, 6]]), whole)
    out = compute_policy_loss(config, batch.loss_inputs(token_logprobs(model, batch.input_ids)),
                              denominator_parts(batch.loss_mask, batch.advantages))
    metrics = {k: float(v) for k, v in out.metrics.items()}
    engaged = metrics.get("tis/masked_fraction", metrics.get("tis/imp_ratio_capped_fraction"))
    assert 0 < engaged < 1 and metrics["loss/kl"] != 0


# bf16 tolerances (8 mantissa bits), grads as a fraction of the largest |grad|. Measured: partitions
# differ by <= 1.2e-7 (loss, rel) and 3.4e-3 (grads); bf16 vs fp32 by 7.5e-5 and 5.2e-3.
BF16_LOSS_REL, BF16_GRAD_ATOL = 1e-4, 1e-2
FP32_VS_BF16_LOSS_REL, FP32_VS_BF16_GRAD_ATOL = 1e-3, 2e-2


@pytest.mark.parametrize("mode", MODES)
def test_invariances_hold_in_bf16_mixed_precision(model, batch, mode):
    """bf16 autocast (fp32 master weights, fp32 log-softmax and loss): micro-batches of one and
    accumulation over 4 equal the whole batch at bf16 tolerance; the bf16 step is near fp32's."""
    config = _config(mode)
    whole = _step(model, batch, config, [list(range(8))], torch.bfloat16)
    largest = float(whole[1].abs().max())
    for parts in ([[i] for i in range(8)], [[0, 7], [1, 2, 3], [4], [5, 6]]):
        loss, grads = _step(model, batch, config, parts, torch.bfloat16)
        assert loss == pytest.approx(whole[0], rel=BF16_LOSS_REL)
        assert torch.allclose(grads, whole[1], rtol=0, atol=BF16_GRAD_ATOL * largest)
    fp32 = _step(model, batch, config, [list(range(8))])
    assert whole[0] == pytest.approx(fp32[0], rel=FP32_VS_BF16_LOSS_REL)
    assert torch.allclose(whole[1], fp32[1], rtol=0, atol=FP32_VS_BF16_GRAD_ATOL * float(fp32[1].abs().max()))
    assert not torch.equal(whole[1], fp32[1])  # it really ran in bf16


def test_mean_of_micro_batch_means_is_not_the_step_token_mean(model, batch):
    # Negative control: the bug the step-level denominator avoids changes the loss.
    config = _config("token_mean")
    whole, _ = _step(model, batch, config, [list(range(8))])
    wrong = 0.0
    for idx in ([0, 7], [1, 2, 3], [4], [5, 6]):
        mb = batch.rows(idx)
        loss = compute_policy_loss(config, mb.loss_inputs(token_logprobs(model, mb.input_ids), ref_logprobs=None),
                                   denominator_parts(mb.loss_mask, mb.advantages)).loss
        wrong += float(loss.detach()) / 4
    assert abs(wrong - whole) > 1e-3 * abs(whole)


def _by_hand(per_token, mask, adv, mode):
    rows = []
    for i in range(per_token.shape[0]):
        n_i = int(mask[i].sum())
        s_i = sum(float(per_token[i, t]) for t in range(per_token.shape[1]) if mask[i, t])
        rows.append((n_i, s_i, float(adv[i])))
    total = sum(s for _, s, _ in rows)
    nonempty = sum(1 for n, _, _ in rows if n > 0)
    signal = sum(1 for n, _, a in rows if n > 0 and a != 0)
    return {
        "token_mean": total / max(sum(n for n, _, _ in rows), 1),
        "sequence_mean": sum(s / n for n, s, _ in rows if n > 0) / max(nonempty, 1),
        "seq_mean_token_sum_norm": total / (max(nonempty, 1) * L_MAX),
        "seq_mean_token_sum_norm_global": total / (max(signal, 1) * L_MAX),
    }[mode]


@pytest.mark.parametrize("mode", MODES)
def test_reduction_matches_the_formula_by_hand(mode):
    gen = torch.Generator().manual_seed(3)
    per_token = torch.randn(5, 7, generator=gen)
    mask = torch.rand(5, 7, generator=gen) > 0.4
    mask[1] = False
    per_token[~mask] = float("inf")  # off-mask garbage must not leak
    adv = torch.tensor([0.5, 1.0, 0.0, -0.3, 0.0])
    d = denominator_parts(mask, adv)
    assert d.num_tokens == float(mask.sum()) and d.num_nonempty_rows == 4
    assert d.num_signal_rows == float((mask.any(-1) & (adv != 0)).sum())
    got = reduce_microbatch(per_token, mask, d, mode, L_MAX)
    assert float(got) == pytest.approx(_by_hand(per_token, mask, adv, mode), rel=1e-6)


def test_zero_advantage_rows_add_nothing_to_numerator_or_global_denominator(model, batch):
    config = _config("seq_mean_token_sum_norm_global")
    signal_rows = [0, 1, 3, 4, 6, 7]  # row 2 is empty, row 5 has A = 0
    with_zero_rows = _step(model, batch, config, [list(range(8))])
    without = _step(model, batch, config, [signal_rows])
    _close(with_zero_rows, without)
    d = denominator_parts(batch.loss_mask, batch.advantages)
    assert d.num_signal_rows == 6 and d.num_nonempty_rows == 7
    # a zero-advantage row alone contributes exactly 0 loss and 0 gradient
    lone = _step(model, batch, config, [[5]])
    assert lone[0] == 0.0 and lone[1].abs().max() == 0.0


def test_per_token_advantages_count_signal_rows_on_trainable_tokens_only():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    adv = torch.tensor([[0.0, 0.0, 1.0], [2.0, 0.0, 0.0]])  # row 0: A != 0 only off-mask
    assert denominator_parts(mask, adv).num_signal_rows == 1


def test_all_empty_step_gives_zero_not_nan():
    mask = torch.zeros(2, 4, dtype=torch.bool)
    loss = torch.full((2, 4), float("nan"))
    d = denominator_parts(mask, torch.zeros(2))
    for mode in MODES:
        assert float(reduce_microbatch(loss, mask, d, mode, L_MAX)) == 0.0


def test_seqnorm_modes_need_max_seq_len():
    mask = torch.ones(1, 2, dtype=torch.bool)
    d = denominator_parts(mask, torch.ones(1))
    with pytest.raises(ValueError, match="max_seq_len"):
        reduce_microbatch(torch.ones(1, 2), mask, d, "seq_mean_token_sum_norm_global", None)


def test_step_denominators_round_trip_and_add():
    a, b = StepDenominators(3, 2, 1), StepDenominators(4, 1, 1)
    assert a + b == StepDenominators(7, 3, 2)
    assert StepDenominators.from_tensor((a + b).as_tensor()) == a + b
    assert dp_loss_scale(4) == 4.0 and dp_loss_scale(4, grads_averaged=False) == 1.0
