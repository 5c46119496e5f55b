"""Training rollouts on vLLM are unseeded (vLLM samples the rows of seeded requests one by one);
evaluations stay seeded, and the HF backend keeps its free per-row seeds."""

from __future__ import annotations

from pathlib import Path

from swerl.agent.collect import _seed_of, eval_episode_seed
from swerl.agent.config import AgentConfig
from swerl.sandbox.types import SandboxConfig
from swerl.trainer.rollouts.pipeline import rollout_seed
from swerl.trainer.rollouts.runner import RolloutRunner
from swerl.trainer.config import load_train_config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SEED_YAML = EXAMPLES / "rloo-seqnorm-tis-qwen3-8b.yaml"


def test_vllm_training_rollouts_are_unseeded_and_evaluations_seeded():
    cfg = load_train_config(SEED_YAML)
    assert cfg.generator.backend == "vllm" and cfg.agent.seed is None
    assert rollout_seed(cfg) is None
    runner = RolloutRunner(None, None, SandboxConfig(), cfg.agent, 4, 8, 0.05, rollout_seed(cfg))
    assert runner.agent_cfg.seed is None
    assert _seed_of(runner.agent_cfg.seed, None, "step1/0:task", "task", 0) is None  # every turn: seed None
    assert _seed_of(runner.agent_cfg.seed, 7, "eval1/0:task", "task", 0) == eval_episode_seed(7, "task", 0)


def test_an_explicit_agent_seed_or_the_hf_backend_still_seeds():
    demo = load_train_config(EXAMPLES / "humaneval-smollm2-cpu.yaml", ["generator.backend=hf", "seed=3"])
    assert rollout_seed(demo) == 3
    runner = RolloutRunner(None, None, SandboxConfig(), AgentConfig(seed=5), 4, 8, 0.05, None)
    assert runner.agent_cfg.seed == 5 and _seed_of(5, None, "step1/0:task", "task", 0) is not None


def test_vllm_on_cpu_seeds_its_training_rollouts_and_the_plan_says_what_repeats():
    """vLLM on CPU seeds every training request (measured bit for bit in process, resume included,
    in bench/reproducibility.py); the plan's reproducibility line follows the config's path."""
    from swerl.trainer.setup.plan import reproducibility_words

    cpu_vllm = load_train_config(EXAMPLES / "humaneval-smollm2-cpu-vllm.yaml", ["seed=3", "generator.vllm_mode=inprocess"])
    assert cpu_vllm.model.device == "cpu" and rollout_seed(cpu_vllm) == 3
    assert reproducibility_words(cpu_vllm).startswith("bit for bit")
    servers = load_train_config(EXAMPLES / "humaneval-smollm2-cpu-vllm.yaml", ["seed=3"])
    assert reproducibility_words(servers).startswith("not repeatable: a vLLM server batches requests as they arrive")
    gpu = ["loop.max_staleness_steps=0", "generator.vllm_mode=inprocess"]
    assert reproducibility_words(load_train_config(SEED_YAML, gpu)).startswith(
        "not repeatable: vLLM training rollouts on GPUs are unseeded")
    assert reproducibility_words(load_train_config(SEED_YAML, [*gpu, "agent.seed=5"])).startswith("bit for bit")
    assert reproducibility_words(load_train_config(SEED_YAML)).startswith("not repeatable: rollouts run ahead")
    exact = reproducibility_words(load_train_config(SEED_YAML, ["loop.exact_staleness=true"]))  # still vLLM servers
    assert exact.startswith("not repeatable: a vLLM server batches") and "exact schedule" in exact
    hf = ["generator.backend=hf"]
    batched = load_train_config(EXAMPLES / "humaneval-smollm2-cpu.yaml", [*hf, "generator.max_batch_size=4"])
    assert reproducibility_words(batched).startswith("same samples")
    one = load_train_config(EXAMPLES / "humaneval-smollm2-cpu.yaml", [*hf, "generator.max_batch_size=1"])
    assert reproducibility_words(one).startswith("bit for bit")
    ahead = load_train_config(EXAMPLES / "humaneval-smollm2-cpu.yaml",
                              [*hf, "generator.max_batch_size=1", "loop.max_staleness_steps=1"])
    words = reproducibility_words(ahead)
    assert words.startswith("bit for bit") and "each batch is sampled by the weights 1 step older" in words
    assert "the first 2 batches by the initial ones" in words and words.endswith("(tested bit for bit at k = 1)")
    assert "not the samples" in reproducibility_words(load_train_config(
        EXAMPLES / "humaneval-smollm2-cpu-vllm.yaml", ["seed=3", "generator.vllm_mode=inprocess", "loop.max_staleness_steps=1"]))
