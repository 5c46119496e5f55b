"""TrainConfig: YAML loading, one-line errors, --set overrides, the seed-run example, the run plan, --dry-run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.errors import ConfigError
from swerl.trainer.config import load_train_config
from swerl.trainer.setup.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
SEED_YAML = ROOT / "examples" / "rloo-seqnorm-tis-qwen3-8b.yaml"
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


def test_seed_run_example_has_every_seed_hyperparameter():
    cfg = load_train_config(SEED_YAML)
    a, o, loop, ag = cfg.algorithm, cfg.optimizer, cfg.loop, cfg.agent
    assert (a.advantage_estimator, a.n_samples_per_prompt, a.min_group_size) == ("rloo_n", 8, 4)
    assert (a.policy_loss, a.eps_clip_low, a.eps_clip_high) == ("regular", 0.2, 0.05)
    assert (a.use_tis, a.tis_imp_ratio_cap) == (True, 2.0)
    assert (a.loss_reduction, a.max_seq_len) == ("seq_mean_token_sum_norm_global", 32768)
    assert (a.use_kl_loss, a.entropy_coef) == (False, 0.0)
    assert (o.lr, o.betas, o.weight_decay, o.grad_clip, o.schedule, o.warmup_steps) == (
        8e-6, (0.9, 0.999), 0.0, 0.9, "constant", 0)
    assert (loop.train_batch_size, loop.mini_batch_size, loop.micro_batch_size, loop.epochs, loop.max_steps) == (
        64, 64, 1, 2, 80)
    assert loop.max_staleness_steps == 16
    assert (cfg.checkpointing.ckpt_interval, cfg.checkpointing.hf_save_interval) == (2, 5)
    assert (ag.protocol, ag.enable_thinking, ag.temperature, ag.top_p, ag.top_k) == (
        "terminus-json", True, 0.7, 0.95, 20)
    assert (ag.limits.max_new_tokens_per_turn, ag.limits.context_window_tokens) == (4096, 32768)
    assert cfg.generator.backend == "vllm"
    assert a == a.seed_run().model_copy(update={"kl_loss_coef": a.kl_loss_coef})


def test_demo_example_validates():
    cfg = load_train_config(DEMO_YAML)
    assert (cfg.generator.backend, cfg.model.dtype, cfg.agent.protocol) == ("auto", "auto", "single-turn")


def test_vllm_demo_variant_validates():
    cfg = load_train_config(DEMO_YAML.with_name("humaneval-smollm2-cpu-vllm.yaml"))
    assert cfg.generator.backend == "vllm" and cfg.generator.vllm_mode == "servers" and cfg.agent.protocol == "single-turn"


def test_set_overrides_nested_fields_with_yaml_values():
    cfg = load_train_config(DEMO_YAML, ["optimizer.lr=1e-5", "optimizer.betas=[0.8, 0.9]", "loop.max_steps=7",
                                        "agent.limits.max_turns=3", "model.path=null"])
    assert cfg.optimizer.lr == 1e-5 and cfg.optimizer.betas == (0.8, 0.9)
    assert cfg.loop.max_steps == 7 and cfg.agent.limits.max_turns == 3 and cfg.model.path is None


@pytest.mark.parametrize("override, named", [
    ("trainer.lr=1e-5", "'trainer'"),
    ("optimizer.learning_rate=1", "'optimizer.learning_rate'"),
    ("agent.limits.turns=3", "'agent.limits.turns'"),
])
def test_unknown_override_path_names_the_key(override, named):
    with pytest.raises(ConfigError) as err:
        load_train_config(DEMO_YAML, [override])
    assert named in str(err.value) and "\n" not in str(err.value)


def test_unknown_yaml_field_and_bad_value_are_one_line_errors(tmp_path):
    path = write(tmp_path, "data: {tasks: x}\noptimizer: {lr: 1e-5, momentum: 0.9}\n")
    with pytest.raises(ConfigError, match=r"cfg.yaml: optimizer.momentum: unknown key; known keys: lr, "):
        load_train_config(path)
    with pytest.raises(ConfigError, match=r"optimizer.lr: must be > 0.0; got -1: set optimizer.lr to more than 0.0$"):
        load_train_config(write(tmp_path, "data: {tasks: x}\noptimizer: {lr: -1}\n"))
    with pytest.raises(ConfigError, match=r"line \d+ invalid YAML"):
        load_train_config(write(tmp_path, "data: {tasks: x}\nloop: [\n"))
    with pytest.raises(ConfigError, match="cannot read config"):
        load_train_config(tmp_path / "missing.yaml")


def test_cross_field_rules_name_the_fields(tmp_path):
    with pytest.raises(ConfigError, match="agent.temperature must be > 0"):
        load_train_config(DEMO_YAML, ["agent.temperature=0"])
    with pytest.raises(ConfigError, match="mini_batch_size=3 must divide train_batch_size=4"):
        load_train_config(DEMO_YAML, ["loop.train_batch_size=4", "loop.mini_batch_size=3"])
    with pytest.raises(ConfigError, match="model.fsdp with generator.backend=hf"):
        load_train_config(DEMO_YAML, ["model.fsdp=true", "model.device=cuda", "generator.backend=hf"])
    with pytest.raises(ConfigError, match="generator.max_model_len=8192 is below"):
        load_train_config(SEED_YAML, ["generator.max_model_len=8192"])
    with pytest.raises(ConfigError, match="requires max_seq_len"):
        load_train_config(DEMO_YAML, ["algorithm.max_seq_len=null"])


def test_plan_counts_steps_samples_and_intervals():
    cfg = load_train_config(SEED_YAML)
    plan = make_plan(cfg, num_tasks=5000)
    assert plan.steps_per_epoch == 78 and plan.total_steps == 80
    assert plan.samples_per_step == 512 and plan.token_budget_per_step == 512 * 32768
    assert plan.checkpoint_steps[:3] == [2, 4, 6] and plan.export_steps[-2:] == [75, 80]
    small = make_plan(load_train_config(DEMO_YAML, ["loop.train_batch_size=4", "loop.epochs=2", "loop.max_steps=null",
                                                    "loop.mini_batch_size=2", "loop.update_epochs=2"]), 10)
    assert (small.total_steps, small.optimizer_steps_per_step, small.total_optimizer_steps) == (4, 4, 16)


def test_cli_dry_run_of_the_seed_example_fails_its_preflight_here(tmp_path):
    # The seed example names CUDA and placeholder paths: the dry-run rejects them as the real run
    # would (the device first, where this machine has no GPU; else the missing task set).
    import torch

    result = CliRunner().invoke(app, ["train", str(SEED_YAML), "--dry-run", "--set", "loop.max_steps=10",
                                      "--out", str(tmp_path / "run")])
    expected = "exp_rpt_pymethods2test-large" if torch.cuda.is_available() else "model.device: cuda, but this machine"
    assert result.exception.exit_code == 2 and expected in str(result.exception)
    assert not (tmp_path / "run").exists()


def test_cli_unknown_key_exits_2_with_one_line(tmp_path):
    proc = __import__("subprocess").run(
        [str(ROOT / ".venv" / "bin" / "swerl"), "train", str(DEMO_YAML), "--dry-run", "--set", "trainer.lr=1e-5"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "trainer" in lines[0] and "Traceback" not in proc.stderr


def test_the_dry_run_plan_states_what_dynamic_sampling_may_draw():
    off = make_plan(load_train_config(DEMO_YAML), num_tasks=48)
    assert not [value for item, value in off.placement if item == "dynamic sampling"]
    on = make_plan(load_train_config(DEMO_YAML, ["algorithm.dynamic_sampling.enabled=true",
                                                 "algorithm.dynamic_sampling.max_extra_rounds=2"]), num_tasks=48)
    (line,) = [value for item, value in on.placement if item == "dynamic sampling"]
    b, n = on.prompts_per_step, on.samples_per_step // on.prompts_per_step
    assert "up to 2 extra rounds" in line and f"at most {3 * b} prompts ({3 * b * n} episodes)" in line


def test_the_exact_schedule_is_the_default_and_refuses_what_cannot_wait_for_its_batch():
    """``loop.exact_staleness`` (on by default) holds a version back until the batch that needs it:
    an NCCL sync streams the live weights at reload, and an HF eval of a sharded module would hang.
    The seed run's example keeps the timing-driven schedule."""
    assert load_train_config(DEMO_YAML).loop.exact_staleness
    assert not load_train_config(SEED_YAML).loop.exact_staleness  # the seed run's bound: up to 16, as fresh as possible
    exact = ["loop.exact_staleness=true"]
    with pytest.raises(ConfigError, match=r"generator.weight_sync=nccl streams the trainer's live weights.*"
                                          r"set loop.exact_staleness: false or weight_sync: disk"):
        load_train_config(SEED_YAML, [*exact, "generator.weight_sync=nccl"])
    assert load_train_config(SEED_YAML, ["generator.weight_sync=nccl"])
    assert load_train_config(SEED_YAML, [*exact, "generator.weight_sync=nccl", "loop.max_staleness_steps=0"])
    evaluated = [*exact, "model.fsdp=true", "eval.tasks=t/"]
    with pytest.raises(ConfigError, match=r"model.fsdp shards: set loop.exact_staleness: false or remove eval"):
        load_train_config(SEED_YAML, evaluated)
