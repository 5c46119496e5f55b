"""GPU check of the vLLM backend (needs CUDA and `pip install 'swerl[gpu]'`); prints figures.

1. builds VLLMBackend on the default model (bf16, sleep mode on, processed log-probs);
2. samples a chat prompt and compares vLLM's mu with the HF model's processed log-probs
   (``inference/logp_diff_mean``; bf16 vs fp32, expect ~1e-2);
3. sleeps at level 2, syncs perturbed weights in place (all parameters must load), checks the
   weight version bumped and mu changed; syncs the original weights back and re-probes.
Usage: .venv/bin/python bench/vllm_parity.py [--model PATH]
"""

from __future__ import annotations

import argparse
import time

import torch

from swerl.inference.base import SamplingParams
from swerl.inference.config import InferenceConfig
from swerl.inference.hf import HFBackend
from swerl.inference.models import resolve_model
from swerl.inference.probe import logprob_gap
from swerl.inference.vllm_backend import VLLMBackend


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    path = resolve_model(args.model)
    config = InferenceConfig(backend="vllm", model=str(path), gpu_memory_utilization=0.3, max_model_len=4096)
    start = time.perf_counter()
    engine = VLLMBackend(config, str(path))
    print(f"engine up in {time.perf_counter() - start:.1f} s, state={engine.state.name}")
    reference = HFBackend.from_pretrained(path, dtype="float32", device="cuda")
    messages = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    prompt = reference.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                     return_dict=False)
    for sampling in (SamplingParams(temperature=1.0, max_new_tokens=64, seed=0),
                     SamplingParams(temperature=0.7, top_p=0.95, top_k=20, max_new_tokens=64, seed=0)):
        print(sampling.model_dump(include={"temperature", "top_p", "top_k"}),
              logprob_gap(engine, reference.model, prompt, sampling))

    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    before = engine.generate([prompt], greedy)[0]
    original = {name: tensor.detach().clone() for name, tensor in reference.model.state_dict().items()}
    engine.sleep(2)
    perturbed = {name: tensor + 0.05 * torch.randn_like(tensor) for name, tensor in original.items()}
    start = time.perf_counter()
    loaded = engine.update_weights(perturbed)
    print(f"synced {loaded} params in {time.perf_counter() - start:.2f} s, version {engine.weight_version}")
    after = engine.generate([prompt], greedy)[0]
    print("mu changed after perturbed sync:", after.logprobs != before.logprobs)
    engine.update_weights(original)
    restored = engine.generate([prompt], greedy)[0]
    print("greedy ids restored:", restored.token_ids == before.token_ids, "version", restored.weight_version)
    print("restored probe", logprob_gap(engine, reference.model, prompt, SamplingParams(max_new_tokens=64, seed=1)))


if __name__ == "__main__":
    main()
