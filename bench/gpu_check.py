"""One measurement of the trainer half of ``bench/gpu_check.sh``, in THIS process: the shell runs
each in its own process, so that an out-of-memory ends only its own (a FAIL line naming the size)
and the run goes on. Models are Qwen3-8B-shaped (hidden 4096, 32/8 heads of 128, MLP 12288,
vocab 151,936), built from a config (random weights, no download), FSDP2 + bf16 mixed precision,
micro-batch 1, the seed recipe's algorithm. Each line reads
``PASS|FAIL|SKIP <measurement>: <value> | <machine>``.

Measurements (``python bench/gpu_check.py NAME [--smoke] ...``):

- ``logprob --seq-len L``: peak memory of the chunked log-prob step above the (1, L, V) bf16
  logits (``rl.logprobs``; ``bench/logprob_memory.py``), and of the plain float32 graph where it
  can fit (L <= 16384, or a GPU of 100 GiB or more: at 32k it needs ~90 GB).
- ``checkpointing``: 2 layers at L = 8192, one update with and without gradient checkpointing:
  same loss and gradient norm, lower peak with it.
- ``update --grad-sync every_micro_batch|last_micro_batch``: ``--layers`` (default 4) layers at
  ``--rows`` x ``--seq-len`` (2 x 32768): the update's peak, tokens/s and MFU, and the memory
  PyTorch holds after it: allocated vs reserved, and reserved once ``gc`` + ``empty_cache`` ran
  (what a colocated vLLM wake finds free). Under ``torchrun --nproc_per_node 2`` it is the 2-rank
  step (FSDP2 over NCCL).
- ``disk_sync``: swerl's disk weight sync staging the ``--layers`` model's bf16 weights (gather,
  cast, safetensors into a fresh folder): GB/s. A write under 1 GB is refused outside ``--smoke``:
  it measures latency, not a rate.

``--memory-limit-mib M`` caps what the measured work may allocate beyond what the process holds
when it starts it (CUDA: ``set_per_process_memory_fraction``; CPU: ``RLIMIT_AS``): the suite uses
it to check that an out-of-memory prints a FAIL line and exit code 1. ``--smoke``: tiny shapes on
CPU (gloo), for the suite; its figures say the code runs, not how big or fast it is.
FLOPs per token for MFU: 6N + 12*L*d*T (PaLM's count; gradient-checkpointing recompute not counted).
"""

from __future__ import annotations

import argparse
import gc
import math
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import machine_words  # noqa: E402

BF16_PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense bf16, NVIDIA datasheets (SXM)
GIB = 2**30


def qwen3_8b_config(layers: int, smoke: bool):
    """Qwen3-8B's shapes (``smoke``: tiny ones of the same architecture)."""
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
    return [Row(prompt_ids=torch.randint(0, vocab, (prompt,), generator=gen),
                response_ids=torch.randint(0, vocab, (seq_len - prompt,), generator=gen),
                loss_mask=torch.ones(seq_len - prompt, dtype=torch.bool),
                rollout_logprobs=torch.full((seq_len - prompt,), -2.0), advantage=1.0 if i % 2 else -1.0)
            for i in range(n)]


def line(status: str, name: str, value: str, machine: str) -> str:
    return f"{status} {name}: {value} | {machine}"


def limit_memory(device: torch.device, limit_mib: int | None) -> None:
    """Allow the measured work at most ``limit_mib`` MiB beyond what this process holds now."""
    if limit_mib is None:
        return
    extra = limit_mib * 2**20
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min((torch.cuda.memory_reserved(device) + extra) / total, 1.0), device)
    else:
        vm = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (vm + extra, resource.getrlimit(resource.RLIMIT_AS)[1]))


def is_out_of_memory(err: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or a CPU allocation refused (``RLIMIT_AS``, the host's RAM): a
    MemoryError, torch's allocator error, or a shared object the loader could not map (a module
    first imported under the cap; which allocation fails first depends on what was imported before)."""
    text = str(err).lower()
    return isinstance(err, (torch.cuda.OutOfMemoryError, MemoryError)) or (
        isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)) or (
        isinstance(err, ImportError) and "failed to map segment" in text)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_bytes(device: torch.device) -> int:
    """Peak allocated bytes since the last reset (CUDA), or the process's peak RSS (CPU)."""
    sync(device)
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def build(info, layers: int, smoke: bool, checkpointing: bool, grad_sync: str = "every_micro_batch"):
    """A Qwen3-8B-shaped policy (random), FSDP2 + bf16 compute, AdamW, and the seed's update settings."""
    from transformers import AutoModelForCausalLM

    from swerl.rl.config import AlgorithmConfig
    from swerl.trainer.policy.model import prepare_policy
    from swerl.trainer.config import ModelConfig, OptimizerConfig
    from swerl.trainer.step.optim import build_optimizer
    from swerl.trainer.step.update import UpdateSettings

    cfg = qwen3_8b_config(layers, smoke)
    torch.manual_seed(0)
    with info.device:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    prepare_policy(model, ModelConfig(device=info.device.type, dtype="bfloat16", gradient_checkpointing=checkpointing,
                                      fsdp=True), info)
    algo = AlgorithmConfig(n_samples_per_prompt=8, min_group_size=4, eps_clip_low=0.2, eps_clip_high=0.05,
                           clip_ratio_c=3.0, use_tis=True, tis_imp_ratio_cap=2.0,
                           loss_reduction="seq_mean_token_sum_norm_global", max_seq_len=32768)
    optimizer, scheduler = build_optimizer(model, OptimizerConfig(lr=8e-6, grad_clip=0.9), 100)
    settings = UpdateSettings(temperature=0.7, rows_per_mini_batch=1, micro_batch_size=1, grad_clip=0.9,
                              sharded=True, sync_grads_every_micro_batch=grad_sync == "every_micro_batch")
    return model, cfg, algo, optimizer, scheduler, settings


def measure_logprob(info, args, machine: str) -> list[str]:
    """Chunked (and, where it fits, plain) log-prob step at ``--seq-len``."""
    from logprob_memory import check_lines, measure_one

    length, vocab = (args.seq_len or 64, 512) if args.smoke else (args.seq_len or 32768, 151_936)
    total = torch.cuda.get_device_properties(info.device).total_memory if info.device.type == "cuda" else 0
    plain_fits = args.smoke or length <= 16384 or total >= 100 * GIB
    impls = ("plain", "chunked") if plain_fits else ("chunked",)
    results = []
    for impl in impls:
        limit_memory(info.device, args.memory_limit_mib)
        results.append(measure_one(impl, length, vocab, torch.bfloat16, info.device.type, False))
        gc.collect()
        if info.device.type == "cuda":
            torch.cuda.empty_cache()
    out = check_lines(results, machine)
    if not plain_fits:
        out.append(line("SKIP", f"logprob_peak_memory_plain L={length}", f"the plain graph needs ~8x the "
                        f"{length * vocab * 2 / 1e9:.1f} GB logits, more than this {total / GIB:.0f} GiB GPU", machine))
    return out


def one_update(info, layers: int, seq_len: int, smoke: bool, checkpointing: bool) -> tuple[dict, int]:
    """A warm-up optimizer step, then one whose peak is measured (AdamW's state exists by then)."""
    from swerl.trainer.step.update import train_on_batch

    model, cfg, algo, optimizer, scheduler, s = build(info, layers, smoke, checkpointing)
    batch = rows(1, seq_len, cfg.vocab_size)
    train_on_batch(model, optimizer, scheduler, batch, algo, s, info)
    reset_peak(info.device)
    metrics = train_on_batch(model, optimizer, scheduler, batch, algo, s, info)
    used = peak_bytes(info.device)
    del model, optimizer
    gc.collect()
    if info.device.type == "cuda":
        torch.cuda.empty_cache()
    return metrics, used


def measure_checkpointing(info, args, machine: str) -> list[str]:
    """Gradient checkpointing under FSDP2: the same update (loss, grad norm) for less memory."""
    seq_len, layers = (64, 2) if args.smoke else (8192, 2)
    limit_memory(info.device, args.memory_limit_mib)
    plain, plain_peak = one_update(info, layers, seq_len, args.smoke, checkpointing=False)
    ckpt, ckpt_peak = one_update(info, layers, seq_len, args.smoke, checkpointing=True)
    same = math.isclose(ckpt["grad_norm"], plain["grad_norm"], rel_tol=1e-2) and math.isclose(
        ckpt["loss/policy"], plain["loss/policy"], rel_tol=1e-2, abs_tol=1e-6)
    smaller = args.smoke or ckpt_peak < plain_peak
    return [line("PASS" if same and smaller and plain["grad_norm"] > 0 else "FAIL", "fsdp2_gradient_checkpointing",
                 f"{layers} layers L={seq_len}: grad_norm {ckpt['grad_norm']:.5g} vs {plain['grad_norm']:.5g} without, "
                 f"peak {ckpt_peak / GIB:.1f} vs {plain_peak / GIB:.1f} GiB", machine)]


def peak_tflops(device: torch.device) -> tuple[float, str]:
    """The datasheet's dense bf16 peak of this GPU, or the CPU's measured matmul peak (smoke)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        key = next((k for k in BF16_PEAK_TFLOPS if k in name), "H100")
        return BF16_PEAK_TFLOPS[key], f"{key} bf16 datasheet peak"
    from swerl.inference.machine import measure

    probe = measure("cpu", budget_s=0.1)
    return max(probe.fp32_gflops, probe.bf16_gflops) / 1e3, "measured CPU matmul peak"


def measure_update(info, args, machine: str) -> list[str]:
    """The seed's update on ``--layers`` layers with ``--grad-sync``: peak, speed, cached memory."""
    from swerl.trainer.step.update import train_on_batch

    seq_len = args.seq_len or (64 if args.smoke else 32768)
    layers = 2 if args.smoke else args.layers
    t0 = time.perf_counter()
    model, cfg, algo, optimizer, scheduler, s = build(info, layers, args.smoke, True, args.grad_sync)
    s = replace(s, rows_per_mini_batch=args.rows * info.world_size)
    n_params = sum(p.numel() for p in model.parameters())  # DTensors: the global count
    batch = rows(args.rows * info.world_size, seq_len, cfg.vocab_size)
    built_s = time.perf_counter() - t0
    limit_memory(info.device, args.memory_limit_mib)
    train_on_batch(model, optimizer, scheduler, batch, algo, s, info)  # warm-up: allocates AdamW's m and v
    reset_peak(info.device)
    times = []
    for _ in range(max(args.steps - 1, 1)):
        t0 = time.perf_counter()
        metrics = train_on_batch(model, optimizer, scheduler, batch, algo, s, info)
        sync(info.device)
        times.append(time.perf_counter() - t0)
    update_peak = peak_bytes(info.device)
    step_s = min(times)
    tokens = len(batch) * seq_len
    flops = tokens * (6 * n_params + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq_len)
    top, top_name = peak_tflops(info.device)
    tflops = flops / step_s / 1e12 / info.world_size
    finite = math.isfinite(metrics["loss/policy"]) and metrics["grad_norm"] > 0
    ranks = f"{info.world_size} rank{'s' if info.world_size > 1 else ''}"
    name = f"update_{args.grad_sync}" + ("_2ranks" if info.world_size == 2 else "")
    out = [line("PASS" if finite else "FAIL", name, f"{ranks}, {layers} layers, {len(batch)} x {seq_len} tokens: peak "
                f"{update_peak / GIB:.1f} GiB per rank, {tokens / step_s:.0f} tokens/s, MFU {100 * tflops / top:.1f} % "
                f"of {top:.4g} TFLOP/s ({top_name}), built in {built_s:.0f} s", machine)]
    if info.device.type == "cuda":
        allocated, reserved = torch.cuda.memory_allocated(info.device), torch.cuda.memory_reserved(info.device)
        gc.collect()
        torch.cuda.empty_cache()
        out.append(line("PASS", f"{name}_cached", f"after the update: allocated {allocated / GIB:.1f} GiB, reserved "
                        f"{reserved / GIB:.1f} GiB; after gc + empty_cache reserved "
                        f"{torch.cuda.memory_reserved(info.device) / GIB:.1f} GiB (what a colocated vLLM wake finds "
                        f"free)", machine))
    return out


def measure_disk_sync(info, args, machine: str) -> list[str]:
    """swerl's disk sync staging the model's bf16 weights (gather, cast, safetensors): GB/s."""
    from swerl.inference.weight_sync.disk import write_version

    layers = 2 if args.smoke else args.layers
    model, *_ = build(info, layers, args.smoke, False)
    limit_memory(info.device, args.memory_limit_mib)
    with tempfile.TemporaryDirectory(dir=args.sync_dir) as tmp:
        write_version(model, Path(tmp), 0, torch.bfloat16, "warm")  # the first write opens files, pins memory
        t0 = time.perf_counter()
        folder, nbytes = write_version(model, Path(tmp), 1, torch.bfloat16, "0c0c0c")
        seconds = time.perf_counter() - t0
    rate = nbytes / seconds
    big = nbytes >= 1e9
    seed = ("the seed's 16.4 GB bf16 ~ " f"{16.4e9 / rate:.0f} s per server read" if big else
            "under 1 GB: a latency, not extrapolated")
    return [line("PASS" if big or args.smoke else "FAIL", "disk_sync_staging",
                 f"{nbytes / 1e9:.2f} GB in {seconds:.2f} s = {rate / 1e9:.2f} GB/s to {args.sync_dir or 'the temp dir'}; "
                 f"{seed}", machine)]


MEASUREMENTS = {"logprob": measure_logprob, "checkpointing": measure_checkpointing, "update": measure_update,
                "disk_sync": measure_disk_sync}


def size_words(args) -> str:
    """The measurement's size, for its FAIL line."""
    if args.measurement == "logprob":
        return f"L={args.seq_len or 'default'}"
    if args.measurement == "update":
        return f"{args.layers} layers, {args.rows} x {args.seq_len or 32768} tokens, {args.grad_sync}"
    return f"{args.layers} layers"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measurement", choices=sorted(MEASUREMENTS))
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on CPU (the suite runs this)")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers of Qwen3-8B's shape (8B has 36)")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per row (default 32768; smoke 64)")
    parser.add_argument("--rows", type=int, default=2, help="rows per rank and optimizer step (micro-batch 1 each)")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps after the warm-up one")
    parser.add_argument("--grad-sync", default="every_micro_batch", choices=["every_micro_batch", "last_micro_batch"])
    parser.add_argument("--sync-dir", default=None, help="folder the disk sync writes into (default: the temp dir)")
    parser.add_argument("--memory-limit-mib", type=int, default=None, help="cap the measured work's allocations")
    args = parser.parse_args()

    from swerl.trainer import distributed

    info = distributed.init_distributed("cpu" if args.smoke else "cuda")
    if args.smoke:
        torch.set_num_threads(1)
    machine = machine_words(info.device.type)
    try:
        lines = MEASUREMENTS[args.measurement](info, args, machine)
    except Exception as err:  # noqa: BLE001 - an out-of-memory is a result: one FAIL line, then the next measurement
        if not is_out_of_memory(err):
            raise
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        lines = [line("FAIL", args.measurement, f"out of memory at {size_words(args)}: {first}", machine)]
    if info.is_main:
        print("\n".join(lines), flush=True)
    distributed.destroy()
    sys.exit(1 if any(text.startswith("FAIL") for text in lines) else 0)


if __name__ == "__main__":
    main()
