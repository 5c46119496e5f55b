"""One rank of ``bench/gpu_check.sh``: the real swerl policy update on a Qwen3-8B-shaped model
built from a config (random weights, no download), FSDP2 on one device, bf16 mixed precision,
gradient checkpointing, the seed run's micro-batch (1 row) and sequence length (32768 tokens).

Prints ``<name>: <value> <unit>`` lines: model size, tokens/s, achieved TFLOP/s, MFU against
the device's bf16 peak, peak memory. ``--smoke`` runs the same path on tiny shapes on CPU
(gloo) for the test suite; its MFU is against this CPU's measured bf16 matmul peak.

FLOPs per token: 6N + 12*L*d*T (forward/backward, attention as PaLM counts it; pi_old is the
forward's own log-probs with one mini-batch and one update epoch, and the gradient-checkpointing
recompute is not counted, as MFU conventions do). The first lines name the machine: the CPU, its
bf16 probe on the device and what ``auto`` resolves to there; ``--dtype auto`` trains in that dtype.
Qwen3-8B has 36 layers; one H200 cannot hold fp32 master weights + AdamW for all of them
(16 bytes/parameter = 131 GB), so ``--layers`` (default 8) keeps the 8B layer shapes and
takes about one rank's share of an 8-GPU FSDP run.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

H200_BF16_PEAK_TFLOPS = 989.0  # dense bf16, NVIDIA H200 SXM datasheet


def qwen3_8b_config(layers: int, smoke: bool):
    """Qwen3-8B's shapes (hidden 4096, 32 heads / 8 KV heads of 128, MLP 12288, vocab 151936)."""
    from transformers import Qwen3Config

    if smoke:
        return Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                           tie_word_embeddings=False)
    return Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=layers,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                       rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)


def rows(n: int, seq_len: int, vocab: int):
    """``n`` rows of ``seq_len`` tokens: a 1/8 prompt, a trainable response, rollout mu, A = +-1."""
    from swerl.trainer.batch import Row

    gen = torch.Generator().manual_seed(0)
    prompt = seq_len // 8
    out = []
    for i in range(n):
        out.append(Row(prompt_ids=torch.randint(0, vocab, (prompt,), generator=gen),
                       response_ids=torch.randint(0, vocab, (seq_len - prompt,), generator=gen),
                       loss_mask=torch.ones(seq_len - prompt, dtype=torch.bool),
                       rollout_logprobs=torch.full((seq_len - prompt,), -2.0), advantage=1.0 if i % 2 else -1.0))
    return out


def peak_tflops(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return H200_BF16_PEAK_TFLOPS, f"{torch.cuda.get_device_name(device)} bf16 peak (H200 datasheet)"
    from swerl.inference.machine import measure

    probe = measure("cpu", budget_s=0.1)  # CPUs without bf16 units run fp32 faster
    return max(probe.fp32_gflops, probe.bf16_gflops) / 1e3, "measured CPU matmul peak, best of bf16/fp32"


def resolve_dtype(dtype: str, device: str) -> str:
    """``--dtype``, with ``auto`` resolved as ``model.dtype: auto`` is on ``device``."""
    if dtype != "auto":
        return dtype
    from swerl.trainer.auto import machine_choice

    return machine_choice(device)[1].dtype


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on CPU (the suite runs this)")
    parser.add_argument("--layers", type=int, default=8, help="decoder layers of Qwen3-8B's shape (8B has 36)")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per row (default 32768; smoke 64)")
    parser.add_argument("--rows", type=int, default=2, help="rows per optimizer step (micro-batch 1 each)")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps; the first is warm-up")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "auto"],
                        help="compute dtype (FSDP2 mixed precision); auto: as model.dtype: auto resolves here")
    args = parser.parse_args()
    seq_len = args.seq_len or (64 if args.smoke else 32768)

    from transformers import AutoModelForCausalLM

    from swerl.rl.config import AlgorithmConfig
    from swerl.trainer import distributed
    from swerl.trainer.config import ModelConfig, OptimizerConfig
    from swerl.trainer.model import prepare_policy
    from swerl.trainer.optim import build_optimizer
    from swerl.trainer.update import UpdateSettings, train_on_batch

    from swerl.trainer.auto import machine_summary

    info = distributed.init_distributed("cpu" if args.smoke else "cuda")
    if info.is_main:
        print("\n".join(machine_summary(info.device.type)), flush=True)
    dtype = resolve_dtype(args.dtype, info.device.type)
    model_cfg = ModelConfig(device=info.device.type, dtype=dtype, gradient_checkpointing=True, fsdp=True)
    cfg = qwen3_8b_config(args.layers, args.smoke)
    t0 = time.perf_counter()
    with info.device:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    prepare_policy(model, model_cfg, info)
    print(f"model: {n_params / 1e9:.3f} B parameters, {cfg.num_hidden_layers} layers, built in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    # The seed run's algorithm and optimizer (examples/rloo-seqnorm-tis-qwen3-8b.yaml).
    algo = AlgorithmConfig(n_samples_per_prompt=8, min_group_size=4, eps_clip_low=0.2, eps_clip_high=0.05,
                           clip_ratio_c=3.0, use_tis=True, tis_imp_ratio_cap=2.0,
                           loss_reduction="seq_mean_token_sum_norm_global", max_seq_len=32768)
    optimizer, scheduler = build_optimizer(model, OptimizerConfig(lr=8e-6, grad_clip=0.9), 100)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=args.rows, micro_batch_size=1, grad_clip=0.9,
                       sharded=True, pad_id=0)
    batch = rows(args.rows, seq_len, cfg.vocab_size)
    model.train()
    times = []
    for _ in range(args.steps):
        if info.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        metrics = train_on_batch(model, optimizer, scheduler, batch, algo, s, info)
        if info.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    step_s = min(times[1:] or times)
    tokens = args.rows * seq_len
    flops_tok = 6 * n_params + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq_len
    tflops = tokens / step_s * flops_tok / 1e12
    peak, peak_name = peak_tflops(info.device)
    if info.is_main:
        print(f"loss: {metrics['loss/policy']:.4g} (grad_norm {metrics['grad_norm']:.4g})")
        print(f"update_s: {step_s:.2f} s per optimizer step of {args.rows} x {seq_len} tokens ({dtype})")
        print(f"tokens_per_s: {tokens / step_s:.1f} tokens/s")
        print(f"achieved: {tflops:.4g} TFLOP/s")
        print(f"mfu: {100 * tflops / peak:.1f} % of {peak:.4g} TFLOP/s ({peak_name})")
        if info.device.type == "cuda":
            print(f"peak_memory: {torch.cuda.max_memory_allocated(info.device) / 2**30:.1f} GiB allocated "
                  f"({torch.cuda.max_memory_reserved(info.device) / 2**30:.1f} GiB reserved)")
        else:
            print(f"peak_memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB RSS")
    distributed.destroy()


if __name__ == "__main__":
    main()
