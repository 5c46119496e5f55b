"""compute_policy_loss / compute_advantages: the trainer's entry points, on a real tiny LM."""

import pytest
import torch

from swerl.rl.config import SEED_RUN, AlgorithmConfig
from swerl.rl.kl import kl_k3
from swerl.rl.loss import LossInputs, compute_advantages, compute_policy_loss, kl_share, reported_metric_keys
from swerl.rl.policy_loss import entropy_from_logits, regular
from swerl.rl.reductions import denominator_parts, reduce_microbatch
from swerl.rl.rollout_correction import token_truncate

from ._tiny import ragged_batch, tiny_model, token_logprobs


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def _loss(config, model, batch, denominators=None, **kw):
    """(loss, metrics read as floats) of ``batch``; ``kw`` replaces LossInputs fields."""
    if denominators is None:
        denominators = denominator_parts(batch.loss_mask, batch.advantages)
    logprobs = kw.pop("logprobs") if "logprobs" in kw else token_logprobs(model, batch.input_ids)
    out = compute_policy_loss(config, batch.loss_inputs(logprobs, **kw), denominators)
    return out.loss, {k: float(v) for k, v in out.metrics.items()}


def test_several_updates_drive_ratios_off_one_and_clip_both_signs():
    # PPO epochs on one batch: r == 1 on the first update, then the clip branch must engage
    # for A > 0 (r > 1 + eps_high) and A < 0 (r < 1 - eps_low).
    model = tiny_model(seed=5)
    batch = ragged_batch(model, seed=2)
    batch.old_logprobs = token_logprobs(model, batch.input_ids).detach()
    config = SEED_RUN.model_copy(update={"max_seq_len": 16, "use_tis": False})
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    fractions = []
    for _ in range(4):
        opt.zero_grad()
        loss, metrics = _loss(config, model, batch)
        fractions.append(metrics["policy/clip_fraction"])
        loss.backward()
        opt.step()
    assert fractions[0] == 0.0 and max(fractions[1:]) > 0.0
    with torch.no_grad():
        out = regular(token_logprobs(model, batch.input_ids), batch.old_logprobs, batch.advantages, 0.2, 0.05)
    clipped = out.is_clipped & batch.loss_mask
    adv = batch.advantages[:, None].expand_as(clipped)
    assert (clipped & (adv > 0)).any() and (clipped & (adv < 0)).any()


def test_on_policy_gradient_is_reinforce_with_leave_one_out_advantages(model):
    batch = ragged_batch(model)
    logp = token_logprobs(model, batch.input_ids)
    batch.old_logprobs = logp.detach()
    config = AlgorithmConfig(use_tis=False, loss_reduction="token_mean")
    loss, metrics = _loss(config, model, batch, logprobs=logp)
    n_tok = float(batch.loss_mask.sum())
    expected = -(batch.advantages[:, None] * batch.loss_mask).sum() / n_tok
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    assert metrics["policy/clip_fraction"] == 0.0


def test_missing_rollout_logprobs_mean_weight_one_for_all_rows(model):
    batch = ragged_batch(model)
    with_tis, metrics = _loss(SEED_RUN, model, batch, rollout_logprobs=None, has_rollout_logprobs=None)
    without_tis, _ = _loss(SEED_RUN.model_copy(update={"use_tis": False}), model, batch)
    assert float(with_tis.detach()) == pytest.approx(float(without_tis.detach()), rel=1e-6)
    assert metrics["tis/rows_without_logprobs"] == 8 and metrics["tis/imp_ratio_mean"] == pytest.approx(1.0)


def test_tis_metrics_are_additive_over_micro_batches(model):
    batch = ragged_batch(model)
    denominators = denominator_parts(batch.loss_mask, batch.advantages)
    _, whole = _loss(SEED_RUN, model, batch)
    summed: dict[str, float] = {}
    for idx in ([0, 1, 2], [3, 4], [5, 6, 7]):
        _, part = _loss(SEED_RUN, model, batch.rows(idx), denominators=denominators)
        for key, value in part.items():
            summed[key] = summed.get(key, 0.0) + value
    assert summed == pytest.approx(whole, rel=1e-5)
    assert whole["tis/rows_without_logprobs"] == 1 and whole["tis/imp_ratio_capped_fraction"] > 0


def test_kl_and_entropy_terms_use_token_means_and_need_their_inputs(model):
    batch = ragged_batch(model)
    logits = model(input_ids=batch.input_ids).logits[:, :-1] / 0.7
    entropy = entropy_from_logits(logits)
    config = AlgorithmConfig(use_kl_loss=True, kl_loss_coef=0.5, entropy_coef=0.01)
    ref = batch.old_logprobs - 0.1
    loss, m = _loss(config, model, batch, ref_logprobs=ref, entropy=entropy)
    mask = batch.loss_mask
    assert m["policy/entropy"] == pytest.approx(float(entropy.detach()[mask].mean()), rel=1e-5)
    assert m["loss/total"] == pytest.approx(m["loss/policy"] + 0.5 * m["loss/kl"] - 0.01 * m["policy/entropy"], rel=1e-5)
    loss.backward()
    with pytest.raises(ValueError, match="ref_logprobs"):
        _loss(config, model, batch, entropy=entropy, ref_logprobs=None)
    with pytest.raises(ValueError, match="entropy"):
        _loss(config, model, batch, ref_logprobs=ref)


def test_compute_advantages_dispatches_on_the_estimator():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    groups = torch.zeros(8, dtype=torch.int64)
    exclude = torch.tensor([False] * 5 + [True] * 3)
    a, m = compute_advantages(SEED_RUN, rewards, groups, exclude)
    assert a[:3].tolist() == pytest.approx([5 / 4 * (1 - 3 / 5)] * 3) and m["advantage/excluded_rows"] == 3
    a, _ = compute_advantages(AlgorithmConfig(advantage_estimator="rloo"), rewards, groups, None)
    assert float(a[0]) == pytest.approx(8 / 7 * 5 / 8)
    a, _ = compute_advantages(AlgorithmConfig(advantage_estimator="grpo"), rewards, groups, None)
    assert float(a[0]) == pytest.approx(float((1 - 3 / 8) / (rewards.std() + 1e-6)), rel=1e-5)


def test_shape_mismatch_is_reported(model):
    batch = ragged_batch(model)
    with pytest.raises(ValueError, match="loss_mask"):
        _loss(SEED_RUN, model, batch, loss_mask=batch.loss_mask[:, :-1])


def test_non_finite_logprobs_off_the_mask_never_reach_value_or_gradient():
    mask = torch.tensor([[True, True, False, False]])
    logp = torch.tensor([[-1.0, -2.0, -float("inf"), float("nan")]], requires_grad=True)
    old = torch.tensor([[-1.02, -1.99, -float("inf"), -3.0]])
    adv = torch.tensor([1.0])
    loss = compute_policy_loss(SEED_RUN, LossInputs(logp, old, adv, mask, rollout_logprobs=old.clone()),
                               denominator_parts(mask, adv)).loss
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert logp.grad[0, 2:].tolist() == [0.0, 0.0] and (logp.grad[0, :2] != 0).all()


def test_registries_cover_every_configurable_name():
    from typing import get_args

    from swerl.rl.config import AdvantageEstimator, LossReduction, PolicyLossName
    from swerl.rl.loss import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
    from swerl.rl.reductions import REDUCTIONS

    assert set(ADVANTAGE_ESTIMATORS) == set(get_args(AdvantageEstimator))
    assert set(POLICY_LOSSES) == set(get_args(PolicyLossName))
    assert set(REDUCTIONS) == set(get_args(LossReduction))
    from swerl.rl.config import AlgorithmConfig

    for entry in [*ADVANTAGE_ESTIMATORS.values(), *POLICY_LOSSES.values()]:  # the config fields each one takes
        assert set(entry.params) <= set(AlgorithmConfig.model_fields), entry


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_seed_preset_loss_and_gradient_are_unchanged_bit_for_bit(model):
    """The seed recipe through today's compute_policy_loss equals, bit for bit, the composition it
    was before rollout corrections and the KL term existed: where-masked log-probs, ``regular`` PPO
    clip times the token-level TIS weight, the seqnorm-global reduction."""
    batch = ragged_batch(model)
    denominators = denominator_parts(batch.loss_mask, batch.advantages)
    mask = batch.loss_mask
    logp = torch.where(mask, token_logprobs(model, batch.input_ids), 0.0)
    old = torch.where(mask, batch.old_logprobs, 0.0)
    before = reduce_microbatch(
        regular(logp, old, batch.advantages, 0.2, 0.05).per_token_loss
        * token_truncate(old, batch.rollout_logprobs, batch.has_rollout_logprobs, mask, 2.0, 0.5).weights,
        mask, denominators, "seq_mean_token_sum_norm_global", 32768)
    before_grads = _grads(model, before)
    now, metrics = _loss(SEED_RUN, model, batch, ref_logprobs=None)
    assert torch.equal(now.detach(), before.detach()) and float(now.detach()) != 0.0
    assert torch.equal(_grads(model, now), before_grads)
    assert metrics["tis/imp_ratio_capped_fraction"] > 0 and "loss/kl" not in metrics


@pytest.mark.parametrize("reduction", ["token_mean", "sequence_mean", "seq_mean_token_sum_norm_global"])
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_term_goes_through_the_reduction(model, reduction, estimator):
    from swerl.rl.kl import KL_ESTIMATORS

    batch = ragged_batch(model)
    config = AlgorithmConfig(use_kl_loss=True, kl_loss_coef=0.3, kl_estimator=estimator, loss_reduction=reduction,
                             max_seq_len=32)
    loss, m = _loss(config, model, batch)
    mask, denominators = batch.loss_mask, denominator_parts(batch.loss_mask, batch.advantages)
    logp = token_logprobs(model, batch.input_ids).detach()
    per_token = KL_ESTIMATORS[estimator](logp, batch.ref_logprobs)
    kl_mode = "seq_mean_token_sum_norm" if reduction == "seq_mean_token_sum_norm_global" else reduction
    assert m["loss/kl"] == pytest.approx(float(reduce_microbatch(per_token, mask, denominators, kl_mode, 32)), rel=1e-5)
    assert m["loss/total"] == pytest.approx(m["loss/policy"] + 0.3 * m["loss/kl"], rel=1e-5)
    assert m["policy/kl_ref_mean"] == pytest.approx(float(kl_k3(logp, batch.ref_logprobs)[mask].mean()), rel=1e-5)
    assert set(m) == reported_metric_keys(config).all
    share = kl_share(m, 0.3)
    assert 0 < share < 1 and share == pytest.approx(abs(0.3 * m["loss/kl"]) / (abs(0.3 * m["loss/kl"]) + m["loss/policy_abs"]))


def test_kl_gradient_reaches_rows_without_advantage(model):
    # Row 5 has A = 0: no policy gradient, but the KL term still pulls it towards the reference.
    batch = ragged_batch(model).rows([5])
    config = AlgorithmConfig(use_kl_loss=True, kl_loss_coef=1.0)
    plain, _ = _loss(AlgorithmConfig(), model, batch)
    with_kl, _ = _loss(config, model, batch)
    assert _grads(model, plain).abs().max() == 0.0 and _grads(model, with_kl).abs().max() > 0.0


def test_masked_corrections_report_what_they_hid(model):
    batch = ragged_batch(model)
    config = AlgorithmConfig(use_tis=False, rollout_correction={"level": "token", "mode": "mask", "high": 2.0})
    _, m = _loss(config, model, batch)
    assert set(m) == reported_metric_keys(config).all
    assert 0 < m["tis/masked_neg_adv_fraction"] <= m["tis/masked_fraction"] < 1
    assert m["tis/imp_ratio_mean"] < m["tis/ratio_mean"]  # masked tokens weigh 0
    everything = AlgorithmConfig(use_tis=False, rollout_correction={"level": "token", "mode": "mask", "high": 1.0001,
                                                                     "low": 0.9999})
    loss, m = _loss(everything, model, batch)
    # every token of a row with sampler log-probs is masked: only row 6 (no log-probs, w = 1) trains
    alone, _ = _loss(AlgorithmConfig(use_tis=False), model, batch.rows([6]),
                     denominators=denominator_parts(batch.loss_mask, batch.advantages))
    assert float(loss.detach()) == pytest.approx(float(alone.detach()), rel=1e-6) and float(alone.detach()) != 0.0


def test_metrics_stay_float64_tensors_on_the_device_and_name_their_token_means(model):
    # Kept as tensors, the trainer reads them once per optimizer step, after the all-reduce.
    batch = ragged_batch(model)
    config = AlgorithmConfig(use_kl_loss=True, kl_loss_coef=0.1, use_tis=False,
                             rollout_correction={"level": "token", "mode": "mask", "high": 2.0})
    out = compute_policy_loss(config, batch.loss_inputs(token_logprobs(model, batch.input_ids)),
                              denominator_parts(batch.loss_mask, batch.advantages))
    assert all(v.dtype == torch.float64 and v.dim() == 0 and not v.requires_grad for v in out.metrics.values())
    reported = reported_metric_keys(config)
    assert out.token_means == reported.token_means and reported.token_means < reported.all
    assert {"tis/masked_fraction", "policy/kl_ref_mean"} <= out.token_means
    assert "policy/clip_fraction" not in out.token_means and "loss/kl" not in out.token_means
