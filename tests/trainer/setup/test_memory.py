"""The plan's peak RAM per process and wall-time estimate, and the warning when RAM is short."""

from __future__ import annotations

import json

from swerl.trainer.config import TrainConfig
from swerl.trainer.setup.memory import (
    RUNTIME_BYTES, estimate_memory, longest_row_tokens, memory_lines, ram_note, time_line, update_bytes,
)

SMOLLM2_135M = {"hidden_size": 576, "num_hidden_layers": 30, "vocab_size": 49152, "num_attention_heads": 9,
                "num_key_value_heads": 3, "intermediate_size": 1536, "head_dim": 64}
SMOLLM2_PARAMS = 134_515_008
DEMO_LONGEST_INSTRUCTION = "x" * 843
"""The longest instruction.md of the demo's 12 HumanEval tasks has 843 characters."""
DEMO_PEAK_BYTES = 8_083_256 * 1024
"""Max RSS of `swerl train examples/humaneval-smollm2-cpu.yaml --set loop.max_steps=3` (GNU time -v,
2026-12-02, 2-core EPYC AVX512-BF16, load average ~10): the README's figure."""


def _cfg(**limits) -> TrainConfig:
    return TrainConfig.model_validate({
        "data": {"tasks": "t/"}, "agent": {"protocol": "single-turn", "limits": {
            "max_turns": 1, "max_new_tokens_per_turn": 128, "context_window_tokens": 1024, **limits}},
        "algorithm": {"n_samples_per_prompt": 4, "min_group_size": 2, "max_seq_len": 1024},
        "loop": {"train_batch_size": 4, "micro_batch_size": 4}, "sandbox": {"concurrency": 16}})


def test_the_row_length_is_the_longest_prompt_plus_the_replies_within_the_limits():
    assert longest_row_tokens(_cfg(), ["x" * 300, "y" * 30]) == 100 + 64 + 128
    assert longest_row_tokens(_cfg(), ["x" * 9000]) == 1024  # capped by the window / max_seq_len
    assert longest_row_tokens(_cfg(max_turns=5), ["x"]) == 1024  # observations: the whole window


def test_activations_count_the_saved_tensors_of_each_layer_and_the_logits():
    shape = {"hidden_size": 4, "num_hidden_layers": 2, "vocab_size": 10, "num_attention_heads": 2,
             "num_key_value_heads": 1, "intermediate_size": 8}
    per_layer = 8 * 4 + 2 + 4 * 8 + 2 * 2 * 5  # 8d + kv_dim + 4I + 2HS, S = 5
    assert update_bytes(shape, 3, 5, 4, False) == 4 * 3 * 5 * 2 * per_layer + 4 * 3 * 3 * 5 * 10
    assert update_bytes(shape, 3, 5, 4, True) == 4 * 3 * 5 * (2 * 4 + per_layer) + 4 * 3 * 3 * 5 * 10


def test_the_demos_estimate_is_within_a_quarter_of_its_measured_peak():
    est = estimate_memory(_cfg(), SMOLLM2_135M, SMOLLM2_PARAMS, [DEMO_LONGEST_INSTRUCTION], 2048)
    print(f"estimate {est.trainer_bytes / 1e9:.2f} GB at S = {est.row_tokens}, measured {DEMO_PEAK_BYTES / 1e9:.2f} GB")
    assert est.trainer_bytes > RUNTIME_BYTES + 16 * SMOLLM2_PARAMS
    assert abs(est.trainer_bytes / DEMO_PEAK_BYTES - 1) < 0.25
    assert est.sandbox_bytes == 16 * 2048 * 2**20 and est.generator_bytes == 0


def test_short_ram_is_a_warning_naming_the_fix():
    est = estimate_memory(_cfg(), SMOLLM2_135M, SMOLLM2_PARAMS, [DEMO_LONGEST_INSTRUCTION], 2048)
    (note,) = ram_note(est, 4 * 10**9)
    assert note.startswith("RAM: the trainer may peak at 8.") and "4.0 GB is available now" in note
    assert "model.gradient_checkpointing=true" in note
    assert ram_note(est, 64 * 10**9) == []


QWEN3_8B = {"hidden_size": 4096, "num_hidden_layers": 36, "vocab_size": 151936, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 12288, "head_dim": 128}
QWEN3_8B_PARAMS = 8_190_735_360


def test_on_a_gpu_host_ram_is_rank_zeros_weights_not_the_training_state():
    """The seed's shape (Qwen3-8B, 32k rows, device cuda, FSDP): the state, activations and logits
    are GPU memory (the plan's per-rank rows), so host RAM is the runtime plus the fp32 weights rank 0
    reads, plus what an offload puts there; a CPU run of the same shape counts all of it."""
    def cfg(device, **model):
        data = _cfg(max_turns=8, context_window_tokens=32768).model_dump()
        data["model"].update(device=device, fsdp=device == "cuda", dtype="bfloat16", **model)
        data["generator"] = {"backend": "vllm", "max_model_len": 32768}
        if model.get("reference_cpu_offload"):
            data["algorithm"].update(use_kl_loss=True, kl_loss_coef=0.001)
        data["algorithm"].update(max_seq_len=32768)
        return TrainConfig.model_validate(data)

    gpu = estimate_memory(cfg("cuda"), QWEN3_8B, QWEN3_8B_PARAMS, ["x"], 2048)
    assert gpu.on_gpu and gpu.trainer_bytes == RUNTIME_BYTES + 4 * QWEN3_8B_PARAMS and gpu.generator_bytes == 0
    cpu = estimate_memory(cfg("cpu"), QWEN3_8B, QWEN3_8B_PARAMS, ["x"], 2048)
    assert not cpu.on_gpu and cpu.trainer_bytes > RUNTIME_BYTES + 16 * QWEN3_8B_PARAMS
    offloaded = estimate_memory(cfg("cuda", cpu_offload=True, reference_cpu_offload=True), QWEN3_8B,
                                QWEN3_8B_PARAMS, ["x"], 2048)
    assert offloaded.trainer_bytes == gpu.trainer_bytes + 16 * QWEN3_8B_PARAMS + 2 * QWEN3_8B_PARAMS
    (label, text), _ = memory_lines(gpu, cfg("cuda"))
    assert label == "peak host RAM: trainer rank 0" and text.startswith("33.3 GB") and "on the GPUs" in text
    (note,) = ram_note(gpu, 16 * 10**9)
    assert note.startswith("RAM: trainer rank 0 may peak at 33.3 GB of host RAM") and "gradient_checkpointing" not in note
    assert ram_note(gpu, 64 * 10**9) == []


def test_wall_time_comes_from_the_last_run_next_to_this_one(tmp_path):
    assert "train 2 steps (--set loop.max_steps=2) to measure one" in time_line(16, 10, tmp_path / "new")[1]
    (tmp_path / "old").mkdir()
    lines = [{"global_step": s, "timing/step_s": t, "reward/num_trajectories": 8.0} for s, t in [(1, 50.0), (2, 40.0),
                                                                                             (3, 60.0)]]
    (tmp_path / "old" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (tmp_path / "old" / "config.yaml").write_text("model: {path: null}\n")
    assert "no earlier run of this model" in time_line(16, 10, tmp_path / "new", "other-model")[1]
    item, text = time_line(16, 10, tmp_path / "new")
    assert item == "wall time (estimate)" and text.startswith("~100 s/step x 10 = ~17 min (median 50 s/step at 8")
