"""What ``model.grad_sync`` costs on 2 gloo ranks on CPU: one optimizer step of ``--micro`` micro-batches
(1 row of ``--seq-len`` tokens each) per rank on a Qwen3-shaped model built from a config, with
``every_micro_batch`` (a reduce-scatter per micro-batch) and ``last_micro_batch`` (one per step),
the fastest of ``--steps`` steps after a warm-up. Prints one line per setting naming the machine.

Usage: .venv/bin/python bench/grad_sync.py [--layers 4] [--hidden 256] [--micro 8] [--seq-len 256]
Run it alone on a quiet machine: it is a figure, not a test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import machine_words  # noqa: E402


def worker(args: argparse.Namespace) -> None:
    from transformers import Qwen3Config

    from swerl.trainer import distributed
    from swerl.trainer.step.update import train_on_batch

    torch.set_num_threads(1)
    info = distributed.init_distributed("cpu")
    import gpu_check  # the same model and update settings as the GPU check

    def config(layers: int, smoke: bool):
        return Qwen3Config(vocab_size=8192, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                           num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=args.hidden // 4, max_position_embeddings=4096, tie_word_embeddings=False)

    gpu_check.qwen3_8b_config = config
    for grad_sync in ("every_micro_batch", "last_micro_batch"):
        model, cfg, algo, optimizer, scheduler, s = gpu_check.build(info, args.layers, True, False, grad_sync)
        from dataclasses import replace

        s = replace(s, rows_per_mini_batch=args.micro * info.world_size)
        batch = gpu_check.rows(args.micro * info.world_size, args.seq_len, cfg.vocab_size)
        times = []
        for _ in range(args.steps + 1):
            t0 = time.perf_counter()
            train_on_batch(model, optimizer, scheduler, batch, algo, s, info)
            times.append(time.perf_counter() - t0)
        n = sum(p.numel() for p in model.parameters())
        if info.is_main:
            print(f"grad_sync {grad_sync}: {min(times[1:]):.2f} s per optimizer step of {args.micro} micro-batches "
                  f"x 1 x {args.seq_len} tokens per rank, 2 gloo ranks, {n / 1e6:.1f} M params | "
                  f"{machine_words('cpu')}", flush=True)
    distributed.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
           "--worker", *sys.argv[1:]]
    sys.exit(subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}).returncode)


if __name__ == "__main__":
    main()
