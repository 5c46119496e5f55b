"""The model options of FSDP2 (accepted on CPU, offload needs sharding) and the placement lines
that ``swerl train --dry-run`` prints for a config (docs/scaling.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.errors import ConfigError
from swerl.trainer.config import load_train_config
from swerl.trainer.setup.model_size import kv_bytes_per_token, lora_param_count, param_count
from swerl.trainer.setup.plan import format_bytes, make_plan

ROOT = Path(__file__).resolve().parents[3]
SEED_YAML = ROOT / "examples" / "rloo-seqnorm-tis-qwen3-8b.yaml"
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
# Qwen3-8B's config.json fields that size it (published model card: 8.19 B parameters).
QWEN3_8B = {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "tie_word_embeddings": False}
# SmolLM2-135M's (the CPU demo's model): 134.5 M parameters.
# The demo with the settings auto resolves to on an AVX2-only CPU (fixed: the plan's words must not depend on this machine).
FIXED = ["model.dtype=float32", "generator.backend=hf"]
SMOLLM2_135M = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True}


def test_fsdp_is_accepted_on_cpu_and_offload_needs_it():
    cfg = load_train_config(DEMO_YAML, ["model.fsdp=true", "generator.backend=vllm", "generator.max_model_len=1024"])
    assert cfg.model.fsdp and cfg.model.device == "cpu"
    with pytest.raises(ConfigError, match="model.cpu_offload needs model.fsdp"):
        load_train_config(DEMO_YAML, ["model.cpu_offload=true"])


def test_placement_sizes_the_seed_run(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    assert param_count(QWEN3_8B) == 8_190_726_144
    assert kv_bytes_per_token(QWEN3_8B) == 2 * 36 * 8 * 128 * 2
    plan = make_plan(load_train_config(SEED_YAML, [f"model.path={tmp_path}"]), num_tasks=5000)
    lines = dict(plan.placement)
    assert "FSDP2 fully_shard" in lines["trainer"] and "one rank per GPU" in lines["trainer"]
    assert "8 ranks 16.4 GB" in lines["trainer state / rank"]  # 8.19 B x 16 B / 8
    assert "unsharded" not in lines["trainer state / rank"]  # model.grad_sync: every_micro_batch, the default
    last = make_plan(load_train_config(SEED_YAML, [f"model.path={tmp_path}", "model.grad_sync=last_micro_batch"]), 5000)
    assert "+ 32.8 GB unsharded fp32 gradients between micro-batches" in dict(last.placement)["trainer state / rank"]
    # 2 x 880 x 151936 x 2 B (auto: 4 x 220 positions); 151936 x 4096 x 4 B; 36 x 32768 x 4096 x 2 B
    assert lines["update activations / rank"] == (
        "LM head in chunks of 880 positions (model.lm_head_chunk_tokens): one chunk's logits + their gradient 535 MB "
        "(880 x 151,936 bfloat16) instead of 19.9 GB, + the head's float32 weight gradient 2.5 GB; log-probs in "
        "float32 chunks, +537 MB, 9.7 GB checkpointed hidden states (36 layers)")
    whole = make_plan(load_train_config(SEED_YAML, [f"model.path={tmp_path}", "model.lm_head_chunk_tokens=0"]), 5000)
    assert dict(whole.placement)["update activations / rank"] == (  # 2 x 32768 x 151936 x 2 B
        "logits + their gradient 19.9 GB (1 x 32,768 x 151,936 bfloat16; log-probs in float32 chunks, +537 MB), "
        "9.7 GB checkpointed hidden states (36 layers)")
    assert lines["episodes in flight"] == (
        "64 for the whole run (loop.rollout_concurrency or sandbox.concurrency), each rank running its share: "
        "8 per rank on 8, 4 per rank on 16, 2 per rank on 32, 1 per rank on 64")
    assert "309.2 GB bfloat16" in lines["KV cache, all episodes at full context"]  # 64 x 32768 x 144 KiB
    assert "98.3 GB DCP" in lines["checkpoint / export"] and "16.4 GB bfloat16" in lines["checkpoint / export"]
    assert lines["checkpoint / export"].endswith("written in the background while the next step trains "
                                                 "(checkpointing.async_save)")  # auto, on CUDA
    assert "vLLM" in lines["generator"] and "64 cores" in lines["sandbox cores / memory"]
    assert "max_num_batched_tokens 8,192)" in lines["generator"]  # the GPU default
    assert "reference policy / rank" not in lines  # the seed has no KL term
    kl = make_plan(load_train_config(SEED_YAML, [f"model.path={tmp_path}", "algorithm.use_kl_loss=true",
                                                 "algorithm.kl_loss_coef=0.001", "model.reference_cpu_offload=true"]),
                   num_tasks=5000)
    assert dict(kl.placement)["reference policy / rank"].startswith(  # 8.19 B x 4 B / 8 ranks
        "frozen copy of the initial policy for the k3 KL term: 8 ranks 4.1 GB, 16 ranks 2.0 GB")
    assert "in host RAM (model.reference_cpu_offload)" in dict(kl.placement)["reference policy / rank"]


def test_placement_sizes_the_seed_run_with_lora(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    cfg = load_train_config(SEED_YAML, [f"model.path={tmp_path}", "model.lora.rank=32", "model.lora.alpha=64"])
    lines = dict(make_plan(cfg, num_tasks=5000).placement)
    # r x (in + out) over q, k, v, o, gate, up, down of 36 layers: 32 x 2,728,960 = 87.3 M
    assert lora_param_count(QWEN3_8B, "all-linear", 32) == 36 * 32 * 75_776
    state = lines["trainer state / rank"]
    assert "8.19 B frozen params x 2 B (bfloat16 base) + 87.3 M LoRA params (r=32) x 16 B: 8 ranks 2.2 GB" in state
    assert lines["checkpoint / export"].startswith("1.0 GB DCP (adapters + AdamW state)")
    assert "349 MB fp32 peft adapter" in lines["checkpoint / export"]
    assert lines["weight sync / step"] == "175 MB LoRA adapter per engine (94x less than the 16.4 GB of every weight)"
    assert "trainer state 2.2 GB" in lines["GPU memory, trainer GPU"]
    assert dict(make_plan(load_train_config(SEED_YAML, [f"model.path={tmp_path}"]), 5000).placement)[
        "weight sync / step"].startswith("16.4 GB bfloat16 weights per engine; ")  # every weight, then how it travels


@pytest.mark.docker  # the dry run is a preflight: it loads the tasks and asks Docker for their images
def test_dry_run_prints_the_placement(tmp_path):
    from swerl.tasks import import_humaneval

    import_humaneval(tmp_path / "tasks", limit=61)  # the demo's task names are humaneval-002..060
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(SMOLLM2_135M))  # sizes the disk rows
    result = CliRunner().invoke(app, ["train", str(DEMO_YAML), "--dry-run", "--set", f"data.tasks={tmp_path / 'tasks'}",
                                      "--set", f"model.path={tmp_path / 'model'}", "-o", str(tmp_path / "run"),
                                      *(arg for fixed in FIXED for arg in ("--set", fixed))])
    assert result.exit_code == 0, result.output
    assert "episodes in flight" in result.output and "HF generate in this process" in result.output
    assert "torchrun" not in result.output and "GPU" not in result.output
    # Off a terminal (CliRunner's stdout) the plan is wrapped to 100 columns, its text all there.
    table = result.output[result.output.index("run plan"):].splitlines()
    assert max(map(len, table)) <= 100
    flat = " ".join(" ".join(table).translate({ord(c): " " for c in "│┃┏┓┗┛┡┩└┘━─┳╇┴"}).split())
    # The demo keeps the last checkpoint (keep_last 1): 2 on disk while the next one is saved.
    assert "disk: peak of checkpoints + exports 5.4 GB (2 checkpoints at once: keep_last 1 + 1 while saving, " \
           "4 exports)" in flat
    assert "1 torch thread), batches of up to 16 prompts; no weight copy" in flat


def test_a_one_process_cpu_plan_says_what_this_run_does(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_135M))
    lines = dict(make_plan(load_train_config(DEMO_YAML, [f"model.path={tmp_path}", *FIXED]), num_tasks=12).placement)
    assert lines["trainer"] == "1 process on CPU, float32 compute"
    assert lines["trainer state / rank"] == ("134.5 M params x 16 B = 2.2 GB (fp32 weights, gradients, AdamW m and v)")
    assert lines["checkpoint / export"] == ("1.6 GB DCP (fp32 weights + AdamW state) / 538 MB fp32 safetensors; "
                                            "written before the next step")  # async_save auto, on CPU
    assert lines["generator"].startswith("HF generate in this process, with the live policy (CPU, 1 torch thread)")
    assert lines["KV cache, all episodes at full context"] == "755 MB float32 (16 x 1,024 tokens x 45 KiB) in host RAM"
    text = " ".join(lines.values())
    assert "torchrun" not in text and "ranks" not in text and "GPU" not in text and " 0 GB" not in text


def test_a_torchrun_launch_sizes_its_own_ranks(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_135M))
    lines = dict(make_plan(load_train_config(DEMO_YAML, [f"model.path={tmp_path}", *FIXED]), 12, world_size=2).placement)
    assert lines["trainer"] == "2 ranks (torchrun) on CPU, replicated, gradients all-reduced, float32 compute"
    assert lines["trainer state / rank"].endswith("x 16 B: 2 ranks 2.2 GB")  # replicated: the whole state on each
    assert lines["generator"].startswith("HF generate on every rank, each with its live policy")
    assert lines["episodes in flight"].startswith("16 for the whole run") and "8 per rank on 2" in lines["episodes in flight"]
    with pytest.raises(ConfigError, match="below its 32 ranks"):
        make_plan(load_train_config(DEMO_YAML, [f"model.path={tmp_path}"]), 12, world_size=32)


def test_byte_figures_keep_small_sizes_readable():
    assert [format_bytes(b) for b in (12_345, 538e6, 999e6, 1.55e9, 309.24e9)] == [
        "12 kB", "538 MB", "999 MB", "1.6 GB", "309.2 GB"]


def test_a_vllm_plan_names_the_engines_tokens_per_scheduler_step_for_its_device(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_135M))
    vllm_yaml = ROOT / "examples" / "humaneval-smollm2-cpu-vllm.yaml"

    def generator(*sets: str) -> str:
        return dict(make_plan(load_train_config(vllm_yaml, [f"model.path={tmp_path}", *sets]), 12).placement)["generator"]

    assert "max_num_batched_tokens 4,096)" in generator()  # model.device: cpu
    assert "max_num_batched_tokens 8,192 on a GPU, 4,096 on CPU)" in generator("model.device=auto")
    assert "max_num_batched_tokens 2,048)" in generator("model.device=auto", "generator.max_num_batched_tokens=2048")
