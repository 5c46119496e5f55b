"""Peak memory of the trainer's log-prob step, chunked (``rl.logprobs.next_token_logprobs``) vs the
plain float32 graph (``next_token_logprobs_unchunked``, the pre-chunking path), at growing sequence
length L and vocabulary V.

One measurement = what ``update.forward_logprobs`` does after the LM head: (1, L, V) logits in the
model's dtype (bf16 by default, as FSDP2 mixed precision makes them; they exist before the step and
are the baseline), log-probs at temperature 0.7 (and entropies with ``--entropy``: the seed run's
entropy_coef is 0, so it takes none), then the backward of a loss over them, down to the logits'
gradient. The figure is the peak ABOVE the logits, in bytes and as a
multiple of the logits' size; with the logits it is what the step adds to the activations.

CPU: each measurement runs in a fresh process and reads its peak RSS (``ru_maxrss``) over the RSS
once the logits exist (large tensors are mmap'd and returned on free, so RSS follows them).
CUDA: ``torch.cuda.max_memory_allocated`` around the step. Memory is linear in L x V, so the
seed's shape (L = 32768, V = 151,936) is extrapolated from the largest CPU measurement.

Usage: .venv/bin/python bench/logprob_memory.py [--lengths 512,1024,2048] [--vocabs 32768,151936]
       [--dtype bfloat16] [--device cpu|cuda] [--entropy] [--check]
--check prints PASS/FAIL per length (chunked within 1.25x the logits + 1 GiB, not above plain):
what ``bench/gpu_check.sh`` runs. Run it alone (under the CPU lock on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import machine_words  # noqa: E402

from swerl.rl.logprobs import next_token_logprobs, next_token_logprobs_unchunked  # noqa: E402

SEED_LENGTH, SEED_VOCAB = 32768, 151_936  # examples/rloo-seqnorm-tis-qwen3-8b.yaml: Qwen3-8B at 32k context
IMPLS = ("plain", "chunked")


def _rss_bytes() -> int:
    """This process's resident set now (``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize()


def _step(impl: str, logits: torch.Tensor, ids: torch.Tensor, with_entropy: bool) -> None:
    """Log-probs (+ entropies) at T = 0.7, then the backward of a loss over them (logits' grad)."""
    fn = next_token_logprobs if impl == "chunked" else next_token_logprobs_unchunked
    logprobs, entropy = fn(logits, ids, 0.7, with_entropy=with_entropy)
    (logprobs.sum() + (0.01 * entropy.sum() if with_entropy else 0.0)).backward()


def measure_one(impl: str, length: int, vocab: int, dtype: torch.dtype, device: str, with_entropy: bool) -> dict:
    """Peak bytes above the (1, L, V) logits during one step of ``impl`` in THIS process (after a
    warm-up step on tiny shapes, so that kernels and allocator pools are not counted)."""
    warm = torch.zeros(1, 8, 16, dtype=dtype, device=device, requires_grad=True)
    _step(impl, warm, torch.zeros(1, 8, dtype=torch.long, device=device), with_entropy)
    gen = torch.Generator(device=device).manual_seed(0)
    logits = torch.empty(1, length, vocab, dtype=dtype, device=device).normal_(generator=gen).requires_grad_(True)
    ids = torch.randint(0, vocab, (1, length), device=device, generator=gen)
    logits_bytes = logits.numel() * logits.element_size()
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        _step(impl, logits, ids, with_entropy)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        base = _rss_bytes()
        _step(impl, logits, ids, with_entropy)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"impl": impl + ("+entropy" if with_entropy else ""), "length": length, "vocab": vocab,
            "dtype": str(dtype).removeprefix("torch."),
            "logits_bytes": logits_bytes, "peak_bytes": max(peak, 0)}


def measure(impl: str, length: int, vocab: int, dtype: torch.dtype, device: str, with_entropy: bool) -> dict:
    """:func:`measure_one` in a fresh process on CPU (RSS peaks never go down), in this one on CUDA."""
    if device == "cuda":
        torch.cuda.empty_cache()
        return measure_one(impl, length, vocab, dtype, device, with_entropy)
    out = subprocess.run([sys.executable, __file__, "--one", impl, str(length), str(vocab), str(dtype),
                          str(int(with_entropy))], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def line(result: dict, machine: str) -> str:
    """``logprob_memory: chunked L=2048 V=151936 bfloat16: +0.70 GB above the 0.62 GB logits (1.12x) | machine``."""
    gb, ratio = result["peak_bytes"] / 1e9, result["peak_bytes"] / result["logits_bytes"]
    return (f"logprob_memory: {result['impl']} L={result['length']} V={result['vocab']} {result['dtype']}: "
            f"+{gb:.2f} GB above the {result['logits_bytes'] / 1e9:.2f} GB logits ({ratio:.2f}x) | {machine}")


def seed_line(results: list[dict]) -> list[str]:
    """Both impls at the seed's shape: peak = a x logits + b (a: the per-element part, b: one chunk's
    graph, constant in L), fitted on the two largest lengths of the largest vocabulary measured."""
    out = []
    for impl in dict.fromkeys(r["impl"] for r in results):
        vocab = max(r["vocab"] for r in results if r["impl"] == impl)
        mine = sorted((r for r in results if r["impl"] == impl and r["vocab"] == vocab), key=lambda r: r["length"])
        if not mine:
            continue
        small, big = mine[-2] if len(mine) > 1 else None, mine[-1]
        slope = big["peak_bytes"] / big["logits_bytes"]
        intercept = 0.0
        if small is not None:
            slope = (big["peak_bytes"] - small["peak_bytes"]) / (big["logits_bytes"] - small["logits_bytes"])
            intercept = max(big["peak_bytes"] - slope * big["logits_bytes"], 0.0)
        logits = SEED_LENGTH * SEED_VOCAB * big["logits_bytes"] / (big["length"] * big["vocab"])
        step = slope * logits + intercept
        out.append(f"logprob_memory_seed: {impl} L={SEED_LENGTH} V={SEED_VOCAB} {big['dtype']}: logits "
                   f"{logits / 1e9:.1f} GB + step {step / 1e9:.1f} GB = {(logits + step) / 1e9:.1f} GB "
                   f"({slope:.2f}x the logits + {intercept / 1e9:.2f} GB, fitted on L="
                   f"{','.join(str(r['length']) for r in mine[-2:])} V={vocab})")
    return out


def check_lines(results: list[dict], machine: str) -> list[str]:
    """PASS when, at each L, the chunked step stays within 1.25x the logits + 1 GiB (its gradient,
    one chunk's graph and the allocator's slack) and is not above the plain one (+64 MiB)."""
    out = []
    for length in sorted({r["length"] for r in results}):
        at = {r["impl"].split("+")[0]: r for r in results if r["length"] == length}
        chunked, plain = at.get("chunked"), at.get("plain")
        ok = chunked is not None and chunked["peak_bytes"] <= 1.25 * chunked["logits_bytes"] + 2**30 and (
            plain is None or chunked["peak_bytes"] <= plain["peak_bytes"] + 2**26)
        value = " vs ".join(f"{impl} +{at[impl]['peak_bytes'] / 2**30:.1f} GiB" for impl in IMPLS if impl in at)
        out.append(f"{'PASS' if ok else 'FAIL'} logprob_peak_memory L={length}: {value} | {machine}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="512,1024,2048", help="comma-separated sequence lengths")
    parser.add_argument("--vocabs", default="32768,151936", help="comma-separated vocabulary sizes")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="the logits' dtype")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--impls", default="plain,chunked", help="which of plain,chunked to run")
    parser.add_argument("--entropy", action="store_true", help="also compute (and differentiate) entropies")
    parser.add_argument("--check", action="store_true", help="also print PASS/FAIL lines per length")
    parser.add_argument("--one", nargs=5, metavar=("IMPL", "L", "V", "DTYPE", "ENTROPY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        impl, length, vocab, dtype, entropy = args.one
        torch.set_num_threads(1)
        print(json.dumps(measure_one(impl, int(length), int(vocab), getattr(torch, dtype.removeprefix("torch.")),
                                     "cpu", entropy == "1")))
        return
    from swerl.trainer.setup.auto import machine_summary

    print("\n".join(machine_summary(args.device)), flush=True)  # the CPU, its bf16 probe, what auto picks here
    machine = machine_words(args.device)
    dtype = getattr(torch, args.dtype)
    results = []
    for vocab in (int(v) for v in args.vocabs.split(",")):
        for length in (int(v) for v in args.lengths.split(",")):
            for impl in args.impls.split(","):
                results.append(measure(impl, length, vocab, dtype, args.device, args.entropy))
                print(line(results[-1], machine), flush=True)
    for text in seed_line(results):
        print(text, flush=True)
    if args.check:
        for text in check_lines(results, machine):
            print(text, flush=True)


if __name__ == "__main__":
    main()
