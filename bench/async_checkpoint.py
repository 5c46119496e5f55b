"""What ``checkpointing.async_save`` changes for one process: a model of ``--params-m`` million fp32
parameters in ``--layers`` linear layers, with its AdamW state (12 B per parameter in the checkpoint),
saved in the foreground (``save_checkpoint``: the whole DCP write blocks) and in the background
(``start_checkpoint``: the host copy and the small files block; the shard write runs in a thread
until ``finish``). Prints, per mode, the seconds the caller is blocked and the seconds until the
checkpoint is committed, the best of ``--repeats``, with the machine. On ``--device cuda`` the
staging is the GPU-to-host copy; on CPU it is a second copy of the state in the same RAM.

Usage: .venv/bin/python bench/async_checkpoint.py [--params-m 200] [--layers 8] [--device cpu] [--dir /tmp]
Run it alone on a quiet machine: it is a figure, not a test.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import machine_words  # noqa: E402


def build(params_m: float, layers: int, device: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, object]:
    """``layers`` square linear layers of ``params_m`` M parameters in all, one AdamW step taken
    (so the optimizer holds its m and v), a constant LR schedule."""
    width = int(math.sqrt(params_m * 1e6 / layers))
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width, bias=False) for _ in range(layers))).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(2, width, device=device)).sum().backward()
    optimizer.step()
    return model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)


def one_save(root: Path, step: int, model, optimizer, scheduler, background: bool) -> tuple[float, float]:
    """(seconds blocked, seconds until committed) of one checkpoint."""
    from swerl.trainer.distributed import DistInfo
    from swerl.trainer.persistence import checkpoint as ckpt

    t0 = time.perf_counter()
    if not background:
        ckpt.save_checkpoint(root, step, model, optimizer, scheduler, {}, "", DistInfo())
        elapsed = time.perf_counter() - t0
        return elapsed, elapsed
    pending = ckpt.start_checkpoint(root, step, model, optimizer, scheduler, {}, "", DistInfo(), background=True)
    blocked = time.perf_counter() - t0
    pending.finish()
    return blocked, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params-m", type=float, default=200.0)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the checkpoints are written")
    args = parser.parse_args()
    model, optimizer, scheduler = build(args.params_m, args.layers, args.device)
    n = sum(p.numel() for p in model.parameters())
    root = Path(tempfile.mkdtemp(prefix="async-ckpt-", dir=args.dir))
    try:
        for background in (False, True):
            runs = [one_save(root, k + 1, model, optimizer, scheduler, background) for k in range(args.repeats)]
            blocked, committed = min(r[0] for r in runs), min(r[1] for r in runs)
            print(f"{'background' if background else 'foreground'}: {n / 1e6:.0f} M params, "
                  f"{12 * n / 1e9:.2f} GB checkpoint: blocked {blocked:.2f} s, committed after {committed:.2f} s "
                  f"(best of {args.repeats}; {machine_words(args.device)})")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
