"""Peak memory and time of one trainer forward + backward with the model's own LM head (the whole
(1, L, V) logits and their gradient) vs the sequence-chunked head (``model.lm_head_chunk_tokens``).

One measurement = ``update.forward_with_mass`` on one row of L tokens (every column a response
column) at temperature 0.7, then the backward of the sum of its log-probs, on a 2-layer Llama of
hidden size 64 over Qwen3's 151,936-entry vocabulary (the head is then most of the work, as at long
context in a real model). The figure is the peak ABOVE the memory held once the model exists.

CPU: each measurement runs in a fresh process and reads its peak RSS (``ru_maxrss``) over its RSS
after a warm-up step on 8 tokens (large tensors are mmap'd and returned on free, so RSS follows
them). CUDA: ``torch.cuda.max_memory_allocated`` around the step.

Usage: .venv/bin/python bench/lm_head_memory.py [--lengths 1024,4096] [--dtype float32|bfloat16]
       [--device cpu|cuda] [--chunk 0]  (--chunk 0: auto's chunk, 880 positions at V = 151,936)
Run it alone (a 2-core machine: about a minute at the defaults).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tiny_llama

from _machine import machine_words  # noqa: E402
from tiny_llama import build_tiny_llama  # noqa: E402

from swerl.rl.lm_head import AUTO_ELEMENTS, resolve_chunk_tokens  # noqa: E402
from swerl.trainer.step.batch import MicroBatch  # noqa: E402
from swerl.trainer.step.update import forward_with_mass  # noqa: E402

VOCAB = 151_936
HEADS = ("own", "chunked")


def _rss_bytes() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize()


def _micro_batch(length: int, device: str) -> MicroBatch:
    ids = torch.randint(1, VOCAB, (1, length), generator=torch.Generator().manual_seed(0)).to(device)
    zeros = torch.zeros(1, length - 1, device=device)
    return MicroBatch(input_ids=ids, attention_mask=torch.ones_like(ids), loss_mask=zeros.bool(), advantages=zeros,
                      rollout_logprobs=zeros, has_rollout_logprobs=torch.ones(1, dtype=torch.bool, device=device),
                      old_logprobs=None, response_starts=torch.zeros(1, dtype=torch.long, device=device),
                      response_lengths=torch.tensor([length - 1], device=device))


def _step(model: torch.nn.Module, mb: MicroBatch, chunk: int, dtype: torch.dtype | None) -> None:
    lp, _, _ = forward_with_mass(model, mb, 0.7, compute_dtype=dtype, lm_head_chunk_tokens=chunk)
    lp.sum().backward()


def measure_one(head: str, length: int, dtype_name: str, device: str, chunk: int) -> dict:
    """Peak bytes above the model, and seconds, of one forward + backward in THIS process."""
    dtype = None if dtype_name == "float32" else torch.bfloat16
    model = build_tiny_llama(VOCAB, 0, hidden_size=64, intermediate_size=128, max_position_embeddings=length).to(device)
    chunk = (chunk or resolve_chunk_tokens(None, 1, AUTO_ELEMENTS, VOCAB)) if head == "chunked" else 0
    _step(model, _micro_batch(8, device), chunk, dtype)  # warm-up: kernels and pools are not counted
    model.zero_grad(set_to_none=False)
    mb = _micro_batch(length, device)
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        base = _rss_bytes()
    start = time.perf_counter()
    _step(model, mb, chunk, dtype)
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"head": head, "chunk": chunk, "length": length, "dtype": dtype_name, "seconds": time.perf_counter() - start,
            "peak_bytes": max(peak, 0), "logits_bytes": length * VOCAB * (4 if dtype is None else 2)}


def measure(head: str, length: int, dtype: str, device: str, chunk: int) -> dict:
    """:func:`measure_one` in a fresh process on CPU (RSS peaks never go down), in this one on CUDA."""
    if device == "cuda":
        torch.cuda.empty_cache()
        return measure_one(head, length, dtype, device, chunk)
    out = subprocess.run([sys.executable, __file__, "--one", head, str(length), dtype, str(chunk)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def line(r: dict, machine: str) -> str:
    """``lm_head_memory: chunked(880) L=4096 V=151936 float32: +0.41 GB, 3.2 s (whole logits 2.49 GB) | machine``."""
    name = f"chunked({r['chunk']})" if r["head"] == "chunked" else "own head"
    return (f"lm_head_memory: {name} L={r['length']} V={VOCAB} {r['dtype']}: +{r['peak_bytes'] / 1e9:.2f} GB, "
            f"{r['seconds']:.1f} s (whole logits {r['logits_bytes'] / 1e9:.2f} GB) | {machine}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,4096", help="comma-separated row lengths")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="the head's compute dtype (bfloat16: autocast over fp32 weights)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--chunk", type=int, default=0, help="positions per chunk; 0 = auto's")
    parser.add_argument("--one", nargs=4, metavar=("HEAD", "L", "DTYPE", "CHUNK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        head, length, dtype, chunk = args.one
        print(json.dumps(measure_one(head, int(length), dtype, "cpu", int(chunk))))
        return
    machine = machine_words(args.device)
    for length in [int(x) for x in args.lengths.split(",")]:
        for head in HEADS:
            print(line(measure(head, length, args.dtype, args.device, args.chunk), machine), flush=True)


if __name__ == "__main__":
    main()
