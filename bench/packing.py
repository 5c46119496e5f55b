"""Padded vs packed rows in the policy update (``model.pack_rows``) on CPU: tokens forwarded and
update time per step.

One step = ``update.train_on_batch`` on one mini-batch (one update epoch, pi_old from the training
forward, SGD), its rows cut into micro-batches longest first as the trainer does. Layouts:
``padded`` (``pack_rows: false``), ``auto`` (what ``pack_rows: auto`` picks for this sdpa model:
``smallest_square``) and ``one_sequence`` (forced: every micro-batch one sequence, as auto does for
flash/flex attention; on sdpa each sequence's whole masked square is computed, shown for the trade).
Per layout: the tokens the model runs per step (padding included) and the summed attention square
(sum over sequences of S^2, what sdpa computes with a mask), then the median update time over
``--repeats`` repeats, the layouts interleaved within each repeat (a loaded machine slows them alike).

Shapes: ``demo``: 16 rows of 172 prompt + 16-128 response tokens (uniform), micro-batches of 4 (the
CPU examples' ``loop.micro_batch_size``), a narrow SmolLM2-shaped Llama (hidden 256, 4 layers,
vocab 8192). ``agent``: 4 rows of 1k-8k tokens (log-uniform; a 512-token prompt, the rest
trainable), one micro-batch, a tiny Llama (hidden 64, 2 layers). Random weights and ids: the
work, not the values, is measured. Times: wall seconds, and the process's CPU seconds (one thread:
the work done, which a loaded machine stretches less than the wall time).
Usage: .venv/bin/python bench/packing.py [--shapes demo,agent] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import cpu_words  # noqa: E402
from swerl.rl.config import AlgorithmConfig  # noqa: E402
from swerl.trainer.distributed import DistInfo  # noqa: E402
from swerl.trainer.step.batch import Row, collate  # noqa: E402
from swerl.trainer.step.packing import pack_micro_batch, packs_rows  # noqa: E402
from swerl.trainer.step.update import UpdateSettings, rank_rows, train_on_batch  # noqa: E402

SHAPES = {
    "demo": {"rows": 16, "micro": 4, "config": {"hidden_size": 256, "intermediate_size": 683, "num_hidden_layers": 4,
                                               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8192}},
    "agent": {"rows": 4, "micro": 4, "config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096}},
}
LAYOUTS = {"padded": "off", "auto": "smallest_square", "one_sequence": "one_sequence"}
ALGO = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2)


def row_shapes(shape: str, rows: int, seed: int = 0) -> list[tuple[int, int]]:
    """(prompt, response) tokens per row of ``shape``."""
    gen = torch.Generator().manual_seed(seed)
    if shape == "demo":
        return [(172, int(t)) for t in torch.randint(16, 129, (rows,), generator=gen)]
    lengths = torch.exp(torch.empty(rows).uniform_(math.log(1024), math.log(8192), generator=gen)).long()
    return [(512, int(n) - 512) for n in lengths]


def make_rows(shapes: list[tuple[int, int]], vocab: int) -> list[Row]:
    gen = torch.Generator().manual_seed(1)
    return [Row(prompt_ids=torch.randint(1, vocab, (p,), generator=gen), response_ids=torch.randint(1, vocab, (t,), generator=gen),
                loss_mask=torch.ones(t, dtype=torch.bool), rollout_logprobs=None, advantage=1.0 if i % 2 else -1.0)
            for i, (p, t) in enumerate(shapes)]


def work(rows: list[Row], settings: UpdateSettings) -> tuple[int, int]:
    """(tokens the model runs, summed attention square) of one step's micro-batches under ``settings``."""
    ordered = rank_rows(rows, DistInfo(), ALGO, settings)
    tokens = square = 0
    for i in range(0, len(ordered), settings.micro_batch_size):
        mb = collate(ordered[i:i + settings.micro_batch_size])
        ids = pack_micro_batch(mb, settings.pack_rows).input_ids if packs_rows(mb, settings.pack_rows) else mb.input_ids
        tokens += ids.numel()
        square += ids.shape[0] * ids.shape[1] ** 2
    return tokens, square


def timed_step(model: torch.nn.Module, rows: list[Row], settings: UpdateSettings) -> tuple[float, float]:
    """(wall s, CPU s) of one update step."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    wall, cpu = time.perf_counter(), time.process_time()
    train_on_batch(model, opt, sched, rows, ALGO, settings, DistInfo())
    return time.perf_counter() - wall, time.process_time() - cpu


def bench_shape(shape: str, repeats: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = SHAPES[shape]
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**spec["config"], max_position_embeddings=32768)).float()
    rows = make_rows(row_shapes(shape, spec["rows"]), spec["config"]["vocab_size"])
    real = sum(len(r.prompt_ids) + len(r.response_ids) for r in rows)
    settings = {name: UpdateSettings(temperature=1.0, rows_per_mini_batch=len(rows), micro_batch_size=spec["micro"],
                                     grad_clip=None, pack_rows=mode) for name, mode in LAYOUTS.items()}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in LAYOUTS}
    for s in settings.values():  # warm-up, on two short rows
        timed_step(model, sorted(rows, key=lambda r: len(r.response_ids))[:2], s)
    for _ in range(repeats):
        for name, s in settings.items():
            times[name].append(timed_step(model, rows, s))
    print(f"{shape}: {len(rows)} rows, {real:,} tokens, micro-batches of {spec['micro']}, "
          f"hidden {spec['config']['hidden_size']} x {spec['config']['num_hidden_layers']} layers")
    base = [statistics.median(t[k] for t in times["padded"]) for k in (0, 1)]
    for name, s in settings.items():
        tokens, square = work(rows, s)
        wall, cpu = (statistics.median(t[k] for t in times[name]) for k in (0, 1))
        print(f"  {name}: {tokens:,} tokens forwarded ({tokens - real:,} padding), attention square {square / 1e6:.1f} M; "
              f"update {wall:.2f} s/step wall ({base[0] / wall:.2f}x padded), {cpu:.2f} CPU s/step "
              f"({base[1] / cpu:.2f}x padded); medians of {repeats}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="demo,agent")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {cpu_words()}, torch {torch.__version__}, {args.threads} thread(s)")
    for shape in args.shapes.split(","):
        bench_shape(shape, args.repeats)
    print(f"load after: {cpu_words()}")


if __name__ == "__main__":
    main()
