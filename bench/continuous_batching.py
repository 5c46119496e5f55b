"""Multi-turn episodes on one vLLM engine, with the batch barrier and without it (continuous batching).

Each of ``--episodes`` concurrent episodes runs ``--turns`` turns: generate (greedy, a per-turn
budget of 8-96 new tokens drawn once from a fixed seed), then a tool call (an ``asyncio.sleep`` of
0.1-0.6 s, also fixed), then the next turn on the grown prompt (prompt + reply + a 20-token
observation), as swerl's agent does. Two async fronts over the SAME in-process engine (default
model, bf16): ``batched`` = the ``AsyncBatcher`` swerl used before (up to ``--batch`` prompts per
``generate`` call, 0.05 s to fill one; a call returns when its longest request ends),
``continuous`` = ``RequestStream`` (each turn submitted at once, back when it finishes).

Prints the machine line, then per front ``<front>: <episodes/min> episodes/min, <tokens/s>
tokens/s, turn latency mean <s> s, wall <s> s`` and the speed-up. A figure, not a test; run it
alone under the lock. Usage: python bench/continuous_batching.py [--episodes 16] [--turns 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time


def machine() -> str:
    """CPU model, its matrix/vector units, cores and the load average (figures depend on all four)."""
    info = open("/proc/cpuinfo").read()
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    units = [name for name, flag in (("AMX", "amx_bf16"), ("AVX512-BF16", "avx512_bf16"), ("AVX2", "avx2"))
             if flag in flags]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"machine: {model} ({'/'.join(units) or 'no AVX2'}), {os.cpu_count()} cores, load average {load}"


def plan(episodes: int, turns: int, seed: int = 0) -> list[list[tuple[int, float]]]:
    """Per episode, per turn: (max new tokens, tool seconds)."""
    rng = random.Random(seed)
    return [[(rng.randint(8, 96), rng.uniform(0.1, 0.6)) for _ in range(turns)] for _ in range(episodes)]


async def episode(front, prompt: list[int], turns: list[tuple[int, float]], latencies: list[float]) -> int:
    """One episode's turns; returns the tokens it generated."""
    from swerl.inference.backends.base import SamplingParams

    generated = 0
    observation = list(range(1000, 1020))
    for budget, tool_s in turns:
        t0 = time.perf_counter()
        reply = await front.generate(prompt, SamplingParams(temperature=0.0, max_new_tokens=budget))
        latencies.append(time.perf_counter() - t0)
        generated += len(reply.token_ids)
        await asyncio.sleep(tool_s)
        prompt = prompt + reply.token_ids + observation
    return generated


async def run_front(front, prompts: list[list[int]], schedule) -> tuple[float, int, list[float]]:
    latencies: list[float] = []
    t0 = time.perf_counter()
    tokens = await asyncio.gather(*(episode(front, p, s, latencies) for p, s in zip(prompts, schedule)))
    return time.perf_counter() - t0, sum(tokens), latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="batched front: prompts per generate call")
    args = parser.parse_args()
    from swerl.inference.backends.base import SamplingParams
    from swerl.inference.backends.batcher import AsyncBatcher, RequestStream
    from swerl.inference.config import VLLMGenerator
    from swerl.inference.model_files import resolve_model
    from swerl.inference.engines.vllm_backend import VLLMBackend

    print(machine())
    config = VLLMGenerator(dtype="bfloat16", enforce_eager=True, max_model_len=2048,
                             max_num_seqs=args.episodes, kv_cache_space_gib=1)
    engine = VLLMBackend(config, str(resolve_model(None)))
    tokenizer = engine.tokenizer
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": f"Task {i}: write a Python function that "
                                               "adds two numbers, then explain it."}],
                                             add_generation_prompt=True, tokenize=True, return_dict=False)
               for i in range(args.episodes)]
    schedule = plan(args.episodes, args.turns)
    engine.generate(prompts[:2], SamplingParams(max_new_tokens=4))  # warm-up
    walls = {}
    try:
        for name, front in (("batched", AsyncBatcher(engine, max_batch_size=args.batch, max_wait_s=0.05)),
                            ("continuous", RequestStream(engine))):
            wall, tokens, latencies = asyncio.run(run_front(front, prompts, schedule))
            walls[name] = wall
            print(f"{name}: {60 * args.episodes / wall:.1f} episodes/min, {tokens / wall:.1f} tokens/s, turn latency "
                  f"mean {sum(latencies) / len(latencies):.2f} s, wall {wall:.1f} s ({args.episodes} episodes x "
                  f"{args.turns} turns, {tokens} tokens)")
    finally:
        engine.close()
    print(f"continuous_speedup: {walls['batched'] / walls['continuous']:.2f} x wall time")


if __name__ == "__main__":
    main()
