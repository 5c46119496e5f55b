"""Advantage estimators against worked examples (docs/algorithms.md, Advantages)."""

import math

import pytest
import torch

from swerl.rl.advantages import NonFiniteRewardError, group_index, grpo, rloo, rloo_n


def _t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def test_rloo_n_golden_values_three_of_eight():
    rewards = _t([1, 1, 1, 0, 0, 0, 0, 0])
    adv, metrics = rloo_n(rewards, torch.zeros(8, dtype=torch.int64), None, min_group_size=4)
    assert adv.dtype == torch.float32
    assert adv[:3].tolist() == pytest.approx([8 / 7 * 5 / 8] * 3)
    assert adv[3:].tolist() == pytest.approx([-8 / 7 * 3 / 8] * 5)
    assert round(float(adv[0]), 4) == 0.7143 and round(float(adv[3]), 4) == -0.4286
    assert metrics["advantage/mean_abs"] == pytest.approx((3 * 5 / 7 + 5 * 3 / 7) / 8)


def test_rloo_equals_reward_minus_mean_of_others():
    rewards = _t([0.2, 0.9, 0.4, 0.0, 1.0])
    adv, _ = rloo(rewards, torch.zeros(5, dtype=torch.int64))
    for i in range(5):
        others = [float(r) for j, r in enumerate(rewards) if j != i]
        assert float(adv[i]) == pytest.approx(float(rewards[i]) - sum(others) / 4, abs=1e-6)


def test_rloo_group_of_one_gets_zero():
    adv, metrics = rloo(_t([1.0, 1.0, 0.0]), torch.tensor([0, 1, 1]))
    assert float(adv[0]) == 0.0
    assert adv[1:].tolist() == pytest.approx([1.0, -1.0])
    assert metrics["advantage/below_min_groups"] == 1


@pytest.mark.parametrize("estimator", ["rloo", "rloo_n", "grpo"])
def test_group_sums_are_zero(estimator):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(40, generator=gen)
    groups = torch.arange(5).repeat_interleave(8)
    fn = {"rloo": rloo, "rloo_n": lambda r, g: rloo_n(r, g, None), "grpo": grpo}[estimator]
    adv, _ = fn(rewards, groups)
    sums = torch.zeros(5).index_add_(0, groups, adv)
    assert sums.abs().max() < 1e-5
    assert adv.abs().sum() > 1.0


@pytest.mark.parametrize("estimator", ["rloo", "rloo_n", "grpo"])
def test_permutation_invariance(estimator):
    gen = torch.Generator().manual_seed(1)
    rewards = (torch.rand(32, generator=gen) > 0.5).float()
    groups = torch.arange(4).repeat_interleave(8)
    exclude = torch.zeros(32, dtype=torch.bool)
    exclude[[3, 17]] = True
    fn = {"rloo": rloo, "rloo_n": rloo_n, "grpo": grpo}[estimator]
    adv, m1 = fn(rewards, groups, exclude)
    perm = torch.randperm(32, generator=gen)
    adv_p, m2 = fn(rewards[perm], groups[perm], exclude[perm])
    assert torch.equal(adv_p, adv[perm])
    assert m1 == pytest.approx(m2)


def test_rloo_n_excluded_rows_leave_the_baseline():
    # 6 real attempts (2 pass) + 2 infra failures: baseline over the 6 only.
    rewards = _t([1, 1, 0, 0, 0, 0, 0, 0])
    exclude = torch.tensor([False] * 6 + [True] * 2)
    adv, metrics = rloo_n(rewards, torch.zeros(8, dtype=torch.int64), exclude, min_group_size=4)
    assert adv[6:].tolist() == [0.0, 0.0]
    assert adv[:2].tolist() == pytest.approx([6 / 5 * (1 - 2 / 6)] * 2)
    assert adv[2:6].tolist() == pytest.approx([6 / 5 * (0 - 2 / 6)] * 4)
    assert metrics["advantage/excluded_rows"] == 2


def test_rloo_n_excluded_reward_value_is_ignored():
    groups = torch.zeros(5, dtype=torch.int64)
    exclude = torch.tensor([False, False, False, False, True])
    a, _ = rloo_n(_t([1, 0, 0, 1, 0]), groups, exclude, min_group_size=4)
    b, _ = rloo_n(_t([1, 0, 0, 1, 1]), groups, exclude, min_group_size=4)
    assert torch.equal(a, b)


def test_rloo_n_below_min_group_size_gets_zero():
    rewards = _t([1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0])
    groups = torch.tensor([0] * 8 + [1] * 4)
    exclude = torch.tensor([False, False, False, True, True, True, True, True] + [False] * 4)
    adv, metrics = rloo_n(rewards, groups, exclude, min_group_size=4)
    assert adv[:8].tolist() == [0.0] * 8  # m = 3 < 4
    assert adv[8:].tolist() == pytest.approx([2 / 3, -2 / 3, 2 / 3, -2 / 3])  # m = 4 == k
    assert metrics["advantage/below_min_groups"] == 1
    assert metrics["advantage/zero_variance_groups"] == 0


def test_rloo_n_zero_variance_group_is_filtered_and_counted():
    rewards = _t([0.35] * 8 + [1, 0, 0, 0])
    groups = torch.tensor([0] * 8 + [1] * 4)
    adv, metrics = rloo_n(rewards, groups, None, min_group_size=4)
    assert adv[:8].tolist() == [0.0] * 8
    assert metrics["advantage/zero_variance_groups"] == 1
    adv_off, metrics_off = rloo_n(rewards, groups, None, min_group_size=4, filter_zero_variance_groups=False)
    assert adv_off[:8].tolist() == [0.0] * 8  # exactly zero, no fp residue
    assert metrics_off["advantage/zero_variance_groups"] == 0
    assert torch.equal(adv_off[8:], adv[8:])


def test_rloo_n_zero_variance_checked_before_min_group_size():
    # m = 2 all-equal: counted as zero-variance (step 2 precedes step 3).
    rewards = _t([1, 1, 0, 0])
    exclude = torch.tensor([False, False, True, True])
    _, metrics = rloo_n(rewards, torch.zeros(4, dtype=torch.int64), exclude, min_group_size=4)
    assert metrics["advantage/zero_variance_groups"] == 1
    assert metrics["advantage/below_min_groups"] == 0


def test_rloo_n_rejects_min_group_size_below_two():
    with pytest.raises(ValueError, match="min_group_size"):
        rloo_n(_t([1, 0]), torch.zeros(2, dtype=torch.int64), None, min_group_size=1)


def test_grpo_fp32_residue_is_finite_and_bounded():
    adv, _ = grpo(_t([0.35] * 7 + [0.0]), torch.zeros(8, dtype=torch.int64))
    assert torch.isfinite(adv).all()
    assert adv.abs().max() <= 7 / math.sqrt(8) + 1e-4
    assert float(adv[7]) < 0 < float(adv[0])
    flat, metrics = grpo(_t([0.35] * 8), torch.zeros(8, dtype=torch.int64))
    assert flat.tolist() == [0.0] * 8
    assert metrics["advantage/zero_variance_groups"] == 1


def test_grpo_matches_torch_std_formula():
    rewards = _t([1, 1, 1, 0, 0, 0, 0, 0])
    adv, _ = grpo(rewards, torch.zeros(8, dtype=torch.int64))
    expected = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
    assert torch.allclose(adv, expected, atol=1e-6)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("estimator", [rloo, rloo_n, grpo])
def test_non_finite_reward_names_the_trajectory(bad, estimator):
    rewards = _t([1, 0, 0, bad, 1, 0])
    with pytest.raises(NonFiniteRewardError, match="trajectory 3"):
        estimator(rewards, torch.zeros(6, dtype=torch.int64), None)


def test_group_index_maps_strings_in_first_appearance_order():
    assert group_index(["b", "a", "b", "c"]).tolist() == [0, 1, 0, 2]


@pytest.mark.parametrize("estimator", [rloo, rloo_n, grpo])
def test_group_with_every_row_excluded_counts_as_below_min(estimator):
    # Group 1 lost all its rows to infrastructure failures: no baseline exists, and the
    # counter must say so (it used to skip such groups).
    rewards = _t([1, 0, 1, 0, 0, 0, 0, 0])
    groups = torch.tensor([0] * 4 + [1] * 4)
    exclude = torch.tensor([False] * 4 + [True] * 4)
    adv, metrics = estimator(rewards, groups, exclude)
    assert adv[4:].tolist() == [0.0] * 4
    assert metrics["advantage/below_min_groups"] == 1
    assert metrics["advantage/excluded_rows"] == 4
