"""Log-prob parity of vLLM engines with the trainer (HF fp32) on the default model, CPU or GPU.

For each engine dtype, one vLLM server (eager) samples the parity probe's fixed prompt plus 4
HumanEval prompts at T=0.7, top-p 1, top-k off; the trainer re-scores the sampled ids with
``log_softmax(logits / T)``. Then a sync that changes only the (tied) embedding, with and without
swerl's re-pack of the tied ``lm_head``. Prints ``<case>: <mean> nats mean, <max> nats max``.
Without the re-pack a head that the CPU build packed at load (oneDNN: fp32 on AVX2, bf16 with
AVX512-BF16/AMX) stays stale; a bf16 head on an AVX2-only CPU is not packed (oneDNN has no bf16
matmul there, vLLM falls back to ``F.linear`` on the live weight) and follows either way.
The first lines name the machine (CPU, bf16 probe, what ``auto`` resolves to); ``auto`` in
``--dtypes`` is the vLLM dtype ``generator.backend: auto`` takes here. Run alone (under the heavy lock).
Usage: python bench/vllm_parity.py [--dtypes bfloat16,float32,auto]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch


def gaps(engine, model, prompts, sampling) -> tuple[float, float]:
    from swerl.inference.probe import rescore

    diffs = []
    for prompt in prompts:
        generation = engine.generate([prompt], sampling)[0]
        diffs.append((torch.tensor(generation.logprobs) - rescore(model, prompt, generation, sampling)).abs())
    every = torch.cat(diffs)
    return every.mean().item(), every.max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bfloat16,float32,auto")
    args = parser.parse_args()
    from swerl.trainer.setup.auto import machine_choice, machine_summary, vllm_dtype_for

    print("\n".join(machine_summary()), flush=True)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swerl.inference.config import VLLMGenerator
    from swerl.inference.factory import build_vllm
    from swerl.inference.model_files import resolve_model
    from swerl.inference.probe import probe_sampling
    from swerl.inference.weight_sync.disk import write_weights
    from swerl.trainer.rollouts.generator import probe_prompt

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench module
    from generation_throughput import humaneval_prompts

    path = resolve_model(None)
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = [probe_prompt(tokenizer)] + humaneval_prompts(tokenizer, 4)
    trainer = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    sampling = probe_sampling(0.7, 64)
    work = Path(tempfile.mkdtemp(prefix="swerl-parity-"))
    for asked in args.dtypes.split(","):
        dtype = vllm_dtype_for(machine_choice("cpu")[0]) if asked == "auto" else asked
        config = VLLMGenerator(vllm_mode="servers", dtype=dtype, enforce_eager=True,
                                 max_model_len=2048, max_num_seqs=8, cpu_cores=["0"], kv_cache_space_gib=1)
        engine = build_vllm(config, str(path), work / "logs")
        try:
            mean, peak = gaps(engine, trainer, prompts, sampling)
            print(f"vllm-{asked}: {mean:.4f} nats mean, {peak:.4f} nats max" + (f" (= {dtype})" if asked == "auto" else ""),
                  flush=True)
            # lm_head.weight is left out: a tied model's state dict names the embedding twice, and
            # loading the untouched copy last would undo the move.
            state = {k: v.clone() for k, v in trainer.state_dict().items() if k != "lm_head.weight"}
            embed = state["model.embed_tokens.weight"]
            embed += 0.2 * embed.std() * torch.randn(embed.shape, generator=torch.Generator().manual_seed(0))
            moved = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            moved.load_state_dict(state, strict=False)
            moved.tie_weights()
            folder = write_weights(moved.state_dict(), work / "sync", getattr(torch, dtype), 1)
            for repack in (False, True):
                engine.reload_weights(str(folder), 1, repack_tied=repack)
                mean, peak = gaps(engine, moved, prompts, sampling)
                label = "re-packed" if repack else "stale"
                print(f"vllm-{dtype}-sync-tied-head-{label}: {mean:.4f} nats mean, {peak:.4f} nats max", flush=True)
        finally:
            engine.close()


if __name__ == "__main__":
    main()
