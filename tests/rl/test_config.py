"""AlgorithmConfig: the seed preset and every rejected combination."""

import pytest
from pydantic import ValidationError

from swerl.rl.config import SEED_RUN, AlgorithmConfig, RolloutCorrectionConfig


def test_seed_run_preset_values():
    cfg = AlgorithmConfig.seed_run()
    assert cfg is SEED_RUN
    assert (cfg.advantage_estimator, cfg.n_samples_per_prompt, cfg.min_group_size) == ("rloo_n", 8, 4)
    assert (cfg.eps_clip_low, cfg.eps_clip_high, cfg.clip_ratio_c) == (0.2, 0.05, 3.0)
    assert cfg.use_tis and cfg.tis_imp_ratio_cap == 2.0
    assert cfg.loss_reduction == "seq_mean_token_sum_norm_global" and cfg.max_seq_len == 32768
    assert not cfg.use_kl_loss and cfg.entropy_coef == 0.0 and cfg.filter_zero_variance_groups


def test_round_trips_through_a_dict():
    assert AlgorithmConfig.model_validate(SEED_RUN.model_dump()) == SEED_RUN


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"min_group_size": 1}, "min_group_size"),
        ({"min_group_size": 9}, "min_group_size"),
        ({"use_tis": True, "tis_imp_ratio_cap": 0.0}, "tis_imp_ratio_cap"),
        ({"use_tis": True, "tis_imp_ratio_cap": -1.0}, "tis_imp_ratio_cap"),
        ({"policy_loss": "reinforce"}, "policy_loss"),
        ({"sampling_support": "topk"}, "sampling_support"),
        ({"loss_reduction": "seq_mean_token_sum_norm"}, "max_seq_len"),
        ({"loss_reduction": "seq_mean_token_sum_norm_global"}, "max_seq_len"),
        ({"loss_reduction": "sum"}, "loss_reduction"),
        ({"advantage_estimator": "ppo"}, "advantage_estimator"),
        ({"eps_clip_low": 1.0}, "eps_clip_low"),
        ({"eps_clip_high": -0.1}, "eps_clip_high"),
        ({"clip_ratio_c": 1.0}, "clip_ratio_c"),
        ({"max_seq_len": 0}, "max_seq_len"),
        ({"kl_loss_coef": -1}, "kl_loss_coef"),
        ({"kl_loss_coef": 0.01}, "use_kl_loss=false"),
        ({"use_kl_loss": True}, "kl_loss_coef"),
        ({"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_estimator": "low_var_kl"}, "kl_estimator"),
        ({"rollout_correction": {"level": "sequence"}}, "use_tis"),
        ({"use_tis": False, "tis_imp_ratio_cap": 5.0, "rollout_correction": {"level": "sequence"}}, "tis_imp_ratio_cap"),
        ({"use_tis": False, "rollout_correction": {"level": "geometric"}}, "mode=mask"),
        ({"use_tis": False, "rollout_correction": {"low": 0.5}}, "mode=mask"),
        ({"use_tis": False, "rollout_correction": {"mode": "mask", "high": 0.9}}, "contain 1"),
        ({"use_tis": False, "rollout_correction": {"mode": "mask", "low": 1.2}}, "contain 1"),
        ({"use_tis": False, "rollout_correction": {"high": 0.0}}, "high"),
        ({"use_tis": False, "rollout_correction": {"level": "row"}}, "level"),
        ({"entropy_coef": -0.1}, "entropy_coef"),
        ({"lr": 1e-6}, "lr"),
    ],
)
def test_illegal_combinations_name_the_field(fields, named):
    with pytest.raises(ValidationError, match=named):
        AlgorithmConfig(**fields)


def test_min_group_size_only_constrains_rloo_n():
    assert AlgorithmConfig(advantage_estimator="grpo", n_samples_per_prompt=2).min_group_size == 4
    with pytest.raises(ValidationError, match="min_group_size"):
        AlgorithmConfig(advantage_estimator="rloo_n", n_samples_per_prompt=2)


def test_tis_cap_irrelevant_when_tis_off():
    assert not AlgorithmConfig(use_tis=False, tis_imp_ratio_cap=0.0).use_tis


def test_use_tis_is_the_token_truncate_correction():
    assert SEED_RUN.correction == RolloutCorrectionConfig(level="token", mode="truncate", high=2.0)
    assert AlgorithmConfig(tis_imp_ratio_cap=3.0).correction.high == 3.0
    assert AlgorithmConfig(use_tis=False).correction is None


def test_a_correction_block_replaces_the_alias_and_round_trips():
    cfg = AlgorithmConfig(use_tis=False, rollout_correction={"level": "sequence", "mode": "mask", "high": 2.0})
    assert cfg.correction == cfg.rollout_correction and cfg.correction.lower_bound == 0.5
    assert AlgorithmConfig.model_validate(cfg.model_dump()) == cfg  # a run's config.yaml reloads (resume)
    geo = RolloutCorrectionConfig(level="geometric", mode="mask", high=1.001)
    assert geo.lower_bound == pytest.approx(1 / 1.001)


def test_kl_term_needs_both_switches():
    cfg = AlgorithmConfig(use_kl_loss=True, kl_loss_coef=0.05, kl_estimator="k2")
    assert (cfg.use_kl_loss, cfg.kl_loss_coef, cfg.kl_estimator) == (True, 0.05, "k2")
    assert AlgorithmConfig().kl_loss_coef == 0.0 and AlgorithmConfig().kl_estimator == "k3"
