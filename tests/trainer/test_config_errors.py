"""Config errors: "did you mean" for typo'd keys, and the blame on the right source (file, --set, default)."""

from __future__ import annotations

from pathlib import Path

import pytest

from swerl.errors import ConfigError
from swerl.trainer.config import load_train_config

DEMO_YAML = Path(__file__).resolve().parents[2] / "examples" / "humaneval-smollm2-cpu.yaml"


def _error(path: Path, overrides: list[str] | None = None) -> str:
    with pytest.raises(ConfigError) as err:
        load_train_config(path, overrides)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_typo_in_a_yaml_key_suggests_the_field_and_blames_the_file(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data: {tasks: x}\noptimizer: {lr: 1e-5, weight_decy: 0.1}\n")
    assert _error(cfg) == f"{cfg}: optimizer.weight_decy: unknown key; did you mean 'weight_decay'?"


def test_typo_in_a_set_key_suggests_the_field():
    message = _error(DEMO_YAML, ["agent.limits.max_turn=3"])
    assert message.startswith("--set agent.limits.max_turn=3:") and "did you mean 'max_turns'?" in message


def test_bad_value_from_set_blames_the_set_not_the_file():
    assert _error(DEMO_YAML, ["optimizer.lr=-1"]).startswith("--set optimizer.lr=-1: optimizer.lr:")
    assert _error(DEMO_YAML, ["loop.train_batch_size=4", "loop.mini_batch_size=3"]).startswith(
        "--set loop.mini_batch_size=3: loop: mini_batch_size=3 must divide")


def test_bad_value_in_the_file_blames_the_file(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data: {tasks: x}\noptimizer: {lr: -1}\n")
    assert _error(cfg, ["loop.max_steps=3"]) == f"{cfg}: optimizer.lr: must be > 0.0; got -1: set optimizer.lr to more than 0.0"


def test_missing_required_section_is_named(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("optimizer: {lr: 1e-5}\n")
    assert _error(cfg) == f"{cfg}: data: required field missing: add it to the file"


def test_misspelled_required_section_names_the_typo_not_the_missing_section(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("dataa: {tasks: x}\noptimizer: {lr: 1e-5}\n")
    assert _error(cfg) == f"{cfg}: dataa: unknown key; did you mean 'data'? (+1 more; -v shows them)"


def test_every_further_error_is_carried_one_line_each(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data: {tasks: x}\nloop: {max_steps: abc}\noptimizer: {lr: fast, weight_decy: 1}\n")
    with pytest.raises(ConfigError) as err:
        load_train_config(cfg, ["loop.train_batch_size=2.5"])
    assert str(err.value).endswith("did you mean 'weight_decay'? (+3 more; -v shows them)")
    assert sorted(err.value.details) == sorted([
        f"{cfg}: optimizer.lr: expected a number, e.g. 1e-06; got 'fast'",
        f"{cfg}: loop.max_steps: expected an integer, e.g. 3; got 'abc'",
        "--set loop.train_batch_size=2.5: loop.train_batch_size: expected an integer, e.g. 4; got 2.5",
    ])


def test_a_value_of_the_wrong_type_names_the_expected_type_with_an_example():
    assert _error(DEMO_YAML, ["loop.max_steps=abc"]) == (
        "--set loop.max_steps=abc: loop.max_steps: expected an integer, e.g. 3; got 'abc'")
    assert _error(DEMO_YAML, ["checkpointing.save_final=maybe"]).endswith(
        "checkpointing.save_final: expected true or false, e.g. true; got 'maybe'")
    assert _error(DEMO_YAML, ["algorithm.eps_clip_low=[1]"]).endswith("expected a number, e.g. 0.2; got [1]")


def test_restart_environment_true_is_rejected_not_ignored():
    from swerl.tasks.task_folder import TaskConfig

    with pytest.raises(Exception, match="restart_environment = true is not supported"):
        TaskConfig.model_validate({"verifier": {"restart_environment": True}})
    assert TaskConfig.model_validate({"verifier": {"restart_environment": False}}).verifier.restart_environment is False



def test_a_kl_coefficient_that_would_be_ignored_is_rejected():
    message = _error(DEMO_YAML, ["algorithm.kl_loss_coef=0.1"])
    assert message.startswith("--set algorithm.kl_loss_coef=0.1:") and "would be ignored" in message
    assert load_train_config(DEMO_YAML, ["algorithm.kl_loss_coef=0"]).algorithm.kl_loss_coef == 0.0


def test_kl_and_correction_settings_name_the_conflict():
    message = _error(DEMO_YAML, ["algorithm.use_kl_loss=true"])
    assert message.startswith("--set algorithm.use_kl_loss=true:") and "kl_loss_coef" in message
    message = _error(DEMO_YAML, ["algorithm.rollout_correction.level=sequence"])  # the file sets use_tis: true
    assert "use_tis=false" in message
    cfg = load_train_config(DEMO_YAML, ["algorithm.use_tis=false", "algorithm.rollout_correction.level=sequence",
                                        "algorithm.rollout_correction.mode=mask"])
    assert (cfg.algorithm.correction.level, cfg.algorithm.correction.mode) == ("sequence", "mask")
    message = _error(DEMO_YAML, ["model.reference_cpu_offload=true"])
    assert "would be ignored" in message and "use_kl_loss" in message
    kl = load_train_config(DEMO_YAML, ["algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0.01",
                                       "model.reference_cpu_offload=true"])
    assert kl.model.reference_cpu_offload and kl.algorithm.kl_estimator == "k3"


@pytest.mark.parametrize(("override", "named"), [
    ("algorithm.dynamic_sampling.max_extra_rounds=0", "algorithm.dynamic_sampling.max_extra_rounds:"),
    ("algorithm.dynamic_sampling.max_round=2", "did you mean 'max_extra_rounds'?"),
    ("algorithm.dynamic_sampling.max_extra_rounds=8", "only read with enabled: true"),
])
def test_dynamic_sampling_settings_are_refused_in_one_line(override, named):
    message = _error(DEMO_YAML, [override])
    assert message.startswith(f"--set {override}:") and named in message, message


def test_the_seed_example_and_the_demo_keep_dynamic_sampling_off():
    for path in (DEMO_YAML, DEMO_YAML.parent / "rloo-seqnorm-tis-qwen3-8b.yaml"):
        assert load_train_config(path).algorithm.dynamic_sampling.enabled is False


REPLAY_YAML = "data: {tasks: x}\nagent: {limits: {context_window_tokens: 4096, max_new_tokens_per_turn: 512}}\n"


@pytest.mark.parametrize(("overrides", "named"), [
    (["generator.backend=vllm", "generator.vllm_mode=servers", "agent.top_k=20", "algorithm.sampling_support=replay"],
     "vLLM servers' completions API does not return"),
    (["generator.backend=vllm", "agent.top_k=20", "algorithm.sampling_support=replay"],
     "set generator.return_sampling_mask=true"),
    (["generator.backend=vllm", "generator.return_sampling_mask=true", "agent.top_k=0"], "needs agent.top_k > 0"),
])
def test_replay_that_the_generator_cannot_feed_is_refused_in_one_line(tmp_path, overrides, named):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(REPLAY_YAML)
    assert named in _error(cfg, overrides)


def test_replay_with_the_hf_backend_or_vllm_kept_sets_loads(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(REPLAY_YAML)
    load_train_config(cfg, ["generator.backend=hf", "agent.top_k=20", "algorithm.sampling_support=replay"])
    load_train_config(cfg, ["generator.backend=vllm", "generator.return_sampling_mask=true", "agent.top_k=20",
                            "algorithm.sampling_support=replay"])
