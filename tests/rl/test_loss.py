"""compute_policy_loss / compute_advantages: the trainer's entry points, on a real tiny LM."""

import pytest
import torch

from swerl.rl.config import SEED_RUN, AlgorithmConfig
from swerl.rl.loss import compute_advantages, compute_policy_loss
from swerl.rl.policy_loss import entropy_from_logits, regular
from swerl.rl.reductions import denominator_parts

from ._tiny import ragged_batch, tiny_model, token_logprobs


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def _loss(config, model, batch, **kw):
    args = dict(
        logprobs=token_logprobs(model, batch.input_ids), old_logprobs=batch.old_logprobs,
        advantages=batch.advantages, loss_mask=batch.loss_mask,
        denominators=denominator_parts(batch.loss_mask, batch.advantages),
        rollout_logprobs=batch.rollout_logprobs, has_rollout_logprobs=batch.has_rollout_logprobs,
    )
    args.update(kw)
    return compute_policy_loss(config, **args)


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
        _loss(config, model, batch, entropy=entropy)
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
    loss, _ = compute_policy_loss(
        SEED_RUN, logprobs=logp, old_logprobs=old, advantages=adv, loss_mask=mask,
        denominators=denominator_parts(mask, adv), rollout_logprobs=old.clone(),
    )
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
