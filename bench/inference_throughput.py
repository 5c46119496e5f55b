"""Generation throughput of the HF backend on the default model (SmolLM2-135M-Instruct, CPU).

Prints tokens/s at batch sizes 1 and 8 by default (sampled, T=0.7, 128 new tokens); a figure, not a test.
Usage: .venv/bin/python bench/inference_throughput.py [--max-new-tokens 128] [--device cpu] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from swerl.inference.base import SamplingParams
from swerl.inference.hf import HFBackend

QUESTIONS = [
    "Write a Python function that reverses a string.",
    "What is the capital of France?",
    "Explain recursion in one paragraph.",
    "List three prime numbers greater than 100.",
    "How do I read a file line by line in Python?",
    "What does HTTP status 404 mean?",
    "Give a haiku about the sea.",
    "Sort the list [3, 1, 2] and explain how.",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch-sizes", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    backend = HFBackend.from_pretrained(None, dtype=args.dtype, device=args.device)
    tokenizer = backend.tokenizer
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                      return_dict=False)
        for q in QUESTIONS
    ]
    sampling = SamplingParams(temperature=0.7, max_new_tokens=args.max_new_tokens, seed=0)
    backend.generate(prompts[:1], sampling.model_copy(update={"max_new_tokens": 4}))  # warm-up
    for batch_size in [int(size) for size in args.batch_sizes.split(",")]:
        batch = [prompts[i % len(prompts)] for i in range(batch_size)]
        start = time.perf_counter()
        gens = backend.generate(batch, sampling.model_copy(update={"seed": None}))
        seconds = time.perf_counter() - start
        tokens = sum(len(g.token_ids) for g in gens)
        print(f"batch {batch_size}, {torch.get_num_threads()} threads: {tokens} tokens in {seconds:.2f} s = "
              f"{tokens / seconds:.1f} tokens/s "
              f"(longest row {max(len(g.token_ids) for g in gens)})")


if __name__ == "__main__":
    main()
