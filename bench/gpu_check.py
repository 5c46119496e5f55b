"""The trainer half of ``bench/gpu_check.sh`` (one rank under torchrun): the seed recipe's update on a
Qwen3-8B-shaped model built from a config (random weights, no download), FSDP2 on one device, bf16
mixed precision, micro-batch 1, the seed's 32768-token rows. Each step prints one line
``PASS|FAIL <step>: <value> | <machine>``:

1. ``logprob_peak_memory`` at L = 8k/16k/32k, V = 151,936 (bf16 logits): the chunked log-probs the
   trainer uses vs the plain float32 graph (``bench/logprob_memory.py``), peak above the logits.
2. ``fsdp2_gradient_checkpointing``: 2 layers at L = 8192, one update with and without gradient
   checkpointing: same loss and gradient norm, lower peak memory with it.
3. ``update_throughput`` and ``seed_memory_split``: ``--layers`` (default 8) of the 36 layers at
   L = 32768, 2 rows: tokens/s and MFU; the memory of weights, AdamW state and the update's peak
   above them, and the seed's rank on 8 GPUs extrapolated from it (its 1/8 of the fp32 state, the
   unsharded fp32 gradients ``model.grad_sync: last_micro_batch`` holds, the checkpointed inputs
   of the 28 layers not built here).

FLOPs per token: 6N + 12*L*d*T (forward/backward, attention as PaLM counts it; pi_old is the
forward's own log-probs with one mini-batch and one update epoch, and the gradient-checkpointing
recompute is not counted, as MFU conventions do). Qwen3-8B has 36 layers; one H200 cannot hold fp32
master weights + AdamW for all of them (16 bytes/parameter = 131 GB), so ``--layers`` keeps the 8B
layer shapes and takes about one rank's share of an 8-GPU run. The first lines name the machine: the
CPU, its bf16 probe on the device and what ``auto`` resolves to there; ``--dtype auto`` trains in that
dtype. ``--smoke`` runs every step on tiny shapes on CPU (gloo) for the test suite: its figures say that
the code runs, not how fast or how big.
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import machine_words  # noqa: E402

H200_BF16_PEAK_TFLOPS = 989.0  # dense bf16, NVIDIA H200 SXM datasheet
SEED_LAYERS, SEED_PARAMS, SEED_RANKS = 36, 8_190_726_144, 8  # Qwen3-8B, the seed's 8 GPUs
GIB = 2**30


def qwen3_8b_config(layers: int, smoke: bool):
    """Qwen3-8B's shapes (hidden 4096, 32 heads / 8 KV heads of 128, MLP 12288, vocab 151936)."""
    from transformers import Qwen3Config

    if smoke:
        return Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                           tie_word_embeddings=False)
    return Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=layers,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                       rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)


def rows(n: int, seq_len: int, vocab: int):
    """``n`` rows of ``seq_len`` tokens: a 1/8 prompt, a trainable response, rollout mu, A = +-1."""
    from swerl.trainer.step.batch import Row

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
    from swerl.trainer.setup.auto import machine_choice

    return machine_choice(device)[1].dtype


def allocated(device: torch.device) -> int:
    """Bytes allocated now: CUDA's allocator, or this process's peak RSS on CPU (smoke)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak(device: torch.device) -> int:
    """Peak bytes since :func:`reset_peak` (CUDA), or the process's peak RSS (CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def build(info, layers: int, smoke: bool, checkpointing: bool, seed: int = 0, dtype: str = "bfloat16"):
    """A Qwen3-8B-shaped policy (random, ``seed``), FSDP2 + ``dtype`` compute, its AdamW and schedule; the
    seed run's algorithm and update settings (examples/rloo-seqnorm-tis-qwen3-8b.yaml)."""
    from transformers import AutoModelForCausalLM

    from swerl.rl.config import AlgorithmConfig
    from swerl.trainer.setup.config import ModelConfig, OptimizerConfig
    from swerl.trainer.policy.model import prepare_policy
    from swerl.trainer.step.optim import build_optimizer
    from swerl.trainer.step.update import UpdateSettings

    cfg = qwen3_8b_config(layers, smoke)
    torch.manual_seed(seed)
    with info.device:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    prepare_policy(model, ModelConfig(device=info.device.type, dtype=dtype, gradient_checkpointing=checkpointing,
                                      fsdp=True), info)
    algo = AlgorithmConfig(n_samples_per_prompt=8, min_group_size=4, eps_clip_low=0.2, eps_clip_high=0.05,
                           clip_ratio_c=3.0, use_tis=True, tis_imp_ratio_cap=2.0,
                           loss_reduction="seq_mean_token_sum_norm_global", max_seq_len=32768)
    optimizer, scheduler = build_optimizer(model, OptimizerConfig(lr=8e-6, grad_clip=0.9), 100)
    return model, cfg, algo, optimizer, scheduler, UpdateSettings


def line(ok: bool, step: str, value: str, machine: str) -> str:
    return f"{'PASS' if ok else 'FAIL'} {step}: {value} | {machine}"


def step_logprob_memory(info, smoke: bool, machine: str) -> list[str]:
    """Chunked vs plain log-prob step at 8k/16k/32k (smoke: tiny, in this process)."""
    from logprob_memory import check_lines, measure, measure_one

    lengths, vocab = ((64, 128), 512) if smoke else ((8192, 16384, 32768), 151_936)
    results = []
    for length in lengths:
        for impl in ("plain", "chunked"):
            if smoke:
                results.append(measure_one(impl, length, vocab, torch.bfloat16, "cpu", False))
            else:
                results.append(measure(impl, length, vocab, torch.bfloat16, info.device.type, False))
    return check_lines(results, machine)


def one_update(info, layers: int, seq_len: int, smoke: bool, checkpointing: bool) -> tuple[dict, int]:
    """The first optimizer step on one row (its metrics), then a second one whose peak is measured
    (AdamW's state exists by then, so the peak is the forward/backward's, not the state's allocation)."""
    from swerl.trainer.step.update import train_on_batch

    model, cfg, algo, optimizer, scheduler, settings = build(info, layers, smoke, checkpointing)
    s = settings(temperature=0.7, rows_per_mini_batch=1, micro_batch_size=1, grad_clip=0.9, sharded=True)
    batch = rows(1, seq_len, cfg.vocab_size)
    model.train()
    metrics = train_on_batch(model, optimizer, scheduler, batch, algo, s, info)
    reset_peak(info.device)
    train_on_batch(model, optimizer, scheduler, batch, algo, s, info)
    used = peak(info.device)
    del model, optimizer
    if info.device.type == "cuda":
        torch.cuda.empty_cache()
    return metrics, used


def step_checkpointing(info, smoke: bool, machine: str) -> list[str]:
    """Gradient checkpointing under FSDP2: the same update (loss, grad norm) for less memory."""
    seq_len, layers = (64, 2) if smoke else (8192, 2)
    plain, plain_peak = one_update(info, layers, seq_len, smoke, checkpointing=False)
    ckpt, ckpt_peak = one_update(info, layers, seq_len, smoke, checkpointing=True)
    same = math.isclose(ckpt["grad_norm"], plain["grad_norm"], rel_tol=1e-2) and math.isclose(
        ckpt["loss/policy"], plain["loss/policy"], rel_tol=1e-2, abs_tol=1e-6)
    smaller = smoke or ckpt_peak < plain_peak
    return [line(same and smaller and plain["grad_norm"] > 0, "fsdp2_gradient_checkpointing",
                 f"{layers} layers L={seq_len}: grad_norm {ckpt['grad_norm']:.5g} vs {plain['grad_norm']:.5g} without, "
                 f"peak {ckpt_peak / GIB:.1f} vs {plain_peak / GIB:.1f} GiB", machine)]


def seed_split(n_params: int, layers: int, seq_len: int, hidden: int, state: int, update_peak: int) -> tuple[float, str]:
    """The seed's rank on 8 GPUs from this measurement: its 1/8 of 16 B/parameter, the unsharded
    fp32 gradients of the whole model (4 B/parameter, grad_sync last_micro_batch), and the update's
    working set measured here (less this model's own fp32 gradients) plus the checkpointed bf16
    inputs of the layers not built. Returns (GiB, words)."""
    working = update_peak - state - 4 * n_params
    extra_layers = (SEED_LAYERS - layers) * seq_len * hidden * 2
    sharded = 16 * SEED_PARAMS / SEED_RANKS
    grads = 4 * SEED_PARAMS
    total = sharded + grads + working + extra_layers
    words = (f"seed rank of {SEED_RANKS} GPUs: state {sharded / GIB:.1f} + unsharded grads {grads / GIB:.1f} + update "
             f"{(working + extra_layers) / GIB:.1f} = {total / GIB:.1f} GiB")
    return total / GIB, words


def step_update_and_split(info, args, machine: str) -> list[str]:
    """The seed's update on ``--layers`` layers: throughput, MFU, and the memory split."""
    from swerl.trainer.step.update import train_on_batch

    smoke = args.smoke
    seq_len = args.seq_len or (64 if smoke else 32768)
    t0 = time.perf_counter()
    model, cfg, algo, optimizer, scheduler, settings = build(info, args.layers, smoke, checkpointing=True, dtype=args.dtype)
    n_params = sum(p.numel() for p in model.parameters())
    weights = allocated(info.device)
    s = settings(temperature=0.7, rows_per_mini_batch=args.rows, micro_batch_size=1, grad_clip=0.9, sharded=True)
    batch = rows(args.rows, seq_len, cfg.vocab_size)
    model.train()
    built_s, times = time.perf_counter() - t0, []
    train_on_batch(model, optimizer, scheduler, batch, algo, s, info)  # warm-up; allocates AdamW's m and v
    state = allocated(info.device)  # weights + AdamW state (gradients are freed after each step)
    reset_peak(info.device)
    for _ in range(max(args.steps - 1, 1)):
        t0 = time.perf_counter()
        metrics = train_on_batch(model, optimizer, scheduler, batch, algo, s, info)
        allocated(info.device)  # synchronizes CUDA
        times.append(time.perf_counter() - t0)
    update_peak = peak(info.device)
    step_s = min(times)
    tokens = args.rows * seq_len
    tflops = tokens / step_s * (6 * n_params + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq_len) / 1e12
    top, top_name = peak_tflops(info.device)
    finite = math.isfinite(metrics["loss/policy"]) and metrics["grad_norm"] > 0
    out = [line(finite, "update_throughput", f"{tokens / step_s:.1f} tokens/s, {tflops:.4g} TFLOP/s, MFU "
                f"{100 * tflops / top:.1f} % of {top:.4g} ({top_name}); {n_params / 1e9:.3f} B params, "
                f"{cfg.num_hidden_layers} layers, {args.rows} x {seq_len} tokens ({args.dtype}), built in {built_s:.0f} s", machine)]
    device_gib = torch.cuda.get_device_properties(info.device).total_memory / GIB if info.device.type == "cuda" else 0
    seed_gib, words = seed_split(n_params, cfg.num_hidden_layers, seq_len, cfg.hidden_size, state, update_peak)
    fits = smoke or seed_gib < 0.9 * device_gib
    out.append(line(fits, "seed_memory_split", f"{cfg.num_hidden_layers} layers at L={seq_len}: weights "
                    f"{weights / GIB:.1f} GiB, AdamW {(state - weights) / GIB:.1f} GiB, update peak "
                    f"{(update_peak - state) / GIB:.1f} GiB above them; {words}"
                    + (f" of {device_gib:.0f}" if device_gib else " (smoke: RSS, not a measurement)"), machine))
    return out


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
    if args.smoke:
        args.layers = 2

    from swerl.trainer.policy import distributed

    from swerl.trainer.setup.auto import machine_summary

    info = distributed.init_distributed("cpu" if args.smoke else "cuda")
    if info.is_main:
        print("\n".join(machine_summary(info.device.type)), flush=True)
    args.dtype = resolve_dtype(args.dtype, info.device.type)
    machine = machine_words(info.device.type)
    failed = False
    for step in (lambda: step_logprob_memory(info, args.smoke, machine),
                 lambda: step_checkpointing(info, args.smoke, machine),
                 lambda: step_update_and_split(info, args, machine)):
        for text in step():
            failed |= text.startswith("FAIL")
            if info.is_main:
                print(text, flush=True)
    distributed.destroy()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
