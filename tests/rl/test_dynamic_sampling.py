"""``algorithm.dynamic_sampling``: which groups carry signal (through the estimator's advantages, masked
rows out of the baseline), and the setting's validation (off in the seed preset, bad values refused)."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from swerl.rl.advantages import group_index, rloo_n
from swerl.rl.config import SEED_RUN, AlgorithmConfig
from swerl.rl.config import DynamicSamplingConfig
from swerl.rl.dynamic_sampling import groups_with_signal


def signal(rewards: list[float], groups: list[str], exclude: list[bool], min_group_size: int = 2) -> list[bool]:
    index = group_index(groups)
    adv, _ = rloo_n(torch.tensor(rewards), index, torch.tensor(exclude), min_group_size=min_group_size)
    return groups_with_signal(adv, index).tolist()


def test_a_group_with_unequal_rewards_has_signal_and_an_all_equal_one_has_none():
    rewards = [1, 0, 0, 0, 1, 1, 1, 1, 0.2, 0.2, 0.2, 0.2]
    groups = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    assert signal(rewards, groups, [False] * 12) == [True, False, False]


def test_masked_rows_do_not_count_toward_signal():
    # b: the only reward that differs is a masked row's, so the usable rewards are all equal;
    # c: two usable rows of four, below min_group_size 3; a: three usable rows that differ.
    rewards = [1, 0, 0, 9, 1, 1, 1, 0, 1, 0, 0, 0]
    groups = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    exclude = [False, False, False, True, False, False, False, True, False, False, True, True]
    assert signal(rewards, groups, exclude, min_group_size=3) == [True, False, False]


def test_rows_in_any_order_and_empty_input():
    assert signal([0, 1, 1, 1, 0, 1], ["a", "b", "a", "b", "a", "b"], [False] * 6) == [True, False]
    assert groups_with_signal(torch.zeros(0), torch.zeros(0, dtype=torch.int64)).tolist() == []
    with pytest.raises(ValueError, match=r"must both be \(N,\)"):
        groups_with_signal(torch.zeros(3), torch.zeros(2, dtype=torch.int64))


def test_off_by_default_and_in_the_seed_preset():
    assert AlgorithmConfig().dynamic_sampling.enabled is False
    assert SEED_RUN.dynamic_sampling == DynamicSamplingConfig(enabled=False)
    on = AlgorithmConfig.model_validate({"dynamic_sampling": {"enabled": True, "max_extra_rounds": 2}})
    assert (on.dynamic_sampling.enabled, on.dynamic_sampling.max_extra_rounds) == (True, 2)


@pytest.mark.parametrize("block", [{"max_extra_rounds": 0}, {"max_extra_rounds": -1}, {"max_extra_rounds": 101},
                                   {"enabled": "sometimes"}, {"max_rounds": 3}, {"max_extra_rounds": 8}])
def test_invalid_settings_are_refused(block):
    """Out of range, the wrong type, an unknown key, and a bound that nothing reads (off)."""
    with pytest.raises(ValidationError, match="dynamic_sampling"):
        AlgorithmConfig.model_validate({"dynamic_sampling": block})
