"""How much of the producer's episode slots idle in the tail of each batch, with one slot budget
per batch (each batch starts after the slowest episode of the one before: swerl before continuous
admission) against one budget shared by the batches in flight (continuous admission, the
timing-driven schedule's producer today; docs/async.md).

A model of the schedule, not a training run: episodes are sleeps on the event loop whose lengths
are drawn log-normal (``--sigma``: the tail; agentic episodes are long-tailed), holding a slot of
the real ``swerl.trainer.rollouts.slots.SlotBudget``; the trainer takes batch s, "updates" for
``--update-s`` seconds and publishes version s; batch s starts once version >= s - 1 - k is
published (the admission rule) and, shared, once every episode of batch s - 1 holds a slot. Time
is compressed: ``--mean-s`` is the mean episode length in seconds.

Prints per schedule: wall seconds per step (steps 2..), the mean ``rollout/slot_idle_share`` of the
batches (share of the slot-seconds between a batch's first start and its last finish that held no
episode), and the trainer's mean wait for its batch; the machine line first.

Usage: python bench/admission.py [--slots 64] [--episodes 128] [--steps 12] [--k 2] [--mean-s 0.05]
[--sigma 1.0] [--update-s 0.1] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import cpu_words  # noqa: E402
from swerl.trainer.rollouts.slots import BatchSlots, SlotBudget  # noqa: E402


async def _batch(slots: BatchSlots, lengths: list[float]) -> None:
    async def episode(length: float) -> None:
        async with slots:
            await asyncio.sleep(length)

    await asyncio.gather(*(episode(x) for x in lengths))


async def _run(args: argparse.Namespace, shared: bool) -> dict[str, float]:
    rng = random.Random(args.seed)  # the same episode lengths for both schedules
    mu = math.log(args.mean_s) - args.sigma ** 2 / 2  # log-normal with mean ``mean_s``
    lengths = [[rng.lognormvariate(mu, args.sigma) for _ in range(args.episodes)] for _ in range(args.steps)]
    published, ready = asyncio.Condition(), {}
    version = [0]
    shares: list[float] = []
    budget = SlotBudget(args.slots)

    async def produce() -> None:
        running = []
        for step in range(1, args.steps + 1):
            async with published:
                await published.wait_for(lambda: version[0] >= step - 1 - args.k)
            slots = (budget if shared else SlotBudget(args.slots)).batch(args.episodes)

            async def collect(step: int = step, slots: BatchSlots = slots) -> None:
                await _batch(slots, lengths[step - 1])
                shares.append(slots.idle_share())
                ready[step] = time.monotonic()

            running.append(asyncio.create_task(collect()))
            await (slots.all_started.wait() if shared else running[-1])
        await asyncio.gather(*running)

    producer = asyncio.create_task(produce())
    waits, marks = [], []
    for step in range(1, args.steps + 1):
        t0 = time.monotonic()
        while step not in ready:
            await asyncio.sleep(0.002)
        waits.append(time.monotonic() - t0)
        marks.append(time.monotonic())
        await asyncio.sleep(args.update_s)
        async with published:
            version[0] = step
            published.notify_all()
    await producer
    return {"step_s": (marks[-1] - marks[0]) / (len(marks) - 1), "idle": sum(shares) / len(shares),
            "wait_s": sum(waits[1:]) / (len(waits) - 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, kind, default in [("--slots", int, 64), ("--episodes", int, 128), ("--steps", int, 12), ("--k", int, 2),
                                ("--mean-s", float, 0.05), ("--sigma", float, 1.0), ("--update-s", float, 0.1),
                                ("--seed", int, 0)]:
        parser.add_argument(flag, type=kind, default=default)
    args = parser.parse_args()
    print(f"machine: {cpu_words()}")
    print(f"{args.slots} slots, {args.episodes} episodes per batch, k = {args.k}, episode mean {args.mean_s} s "
          f"(log-normal sigma {args.sigma}), update {args.update_s} s, {args.steps} steps")
    for name, shared in (("one budget per batch", False), ("shared (continuous)", True)):
        got = asyncio.run(_run(args, shared))
        print(f"{name:22s} step {got['step_s']:.3f} s  slot idle share {got['idle']:.2f}  "
              f"trainer wait {got['wait_s']:.3f} s")


if __name__ == "__main__":
    main()
