"""The vLLM half of ``bench/gpu_check.sh``, written against vLLM's public API (``vllm.LLM``: generate,
sleep, wake_up, collective_rpc, reset_prefix_cache), on a model built from a config (random
weights, the tests' word-level tokenizer, no download). Each step prints one line
``PASS|FAIL|SKIP <step>: <value> | <machine>``:

1. ``vllm_api``: the installed vLLM is in swerl's range (>=0.32,<0.34) and has every call swerl's
   engines, servers, continuous batching (``LLMEngine.add_request``/``step``) and weight syncs
   (disk reload; NCCL transfer classes) make (a missing one names itself).
2. ``vllm_sleep_wake`` (CUDA): sleep(level=1) frees GPU memory, wake_up() samples the same tokens.
3. ``vllm_reload_after_sleep``: sleep(level=2), wake_up(tags=["weights"]), reload_weights from a
   new safetensors folder, wake_up(tags=["kv_cache"]), reset_prefix_cache: the engine samples from
   the new weights (parity with the trainer's fp32 re-scoring under the probe's limit). On CPU
   (no sleep mode in vLLM's CPU build) the reload alone.
4. ``weight_sync_cost``: writing the new weights with swerl's disk sync (bf16 safetensors into a
   fresh folder per version) and reloading them, seconds and GB/s, scaled to the seed's 16.4 GB
   of bf16 weights only from a write of 1 GB or more (FAIL below it outside ``--smoke``).
5. ``vllm_tests``: ``pytest -m vllm tests/inference`` on this machine (CUDA only; the suite runs
   them on CPU).

``--layers`` of Qwen3-8B's layer shape (default 4; hidden 4096, 32/8 heads of 128, MLP 12288) over
the tokenizer's 16 ids; ``--smoke`` uses 2 tiny layers on CPU (fp32).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from _machine import machine_words  # noqa: E402

VLLM_RANGE = ((0, 32), (0, 34))  # pyproject.toml's gpu extra: vllm>=0.32,<0.34
SEED_BF16_BYTES = 2 * 8_190_726_144
PROBE_LIMIT_NATS = 0.1  # the seed's generator.logprob_diff_limit
# (module, attribute or None, what swerl uses it for)
API = [
    ("vllm", "LLM", "in-process engines"),
    ("vllm", "SamplingParams", "sampling with seeds and log-probs"),
    ("vllm.inputs", "TokensPrompt", "token ids in"),
    ("vllm.entrypoints.openai.api_server", None, "vLLM servers"),
    ("vllm.model_executor.layers.vocab_parallel_embedding", "ParallelLMHead", "re-pack of tied heads (worker)"),
    ("vllm.platforms", "current_platform", "worker extension"),
    ("vllm.sampling_params", "RequestOutputKind", "continuous batching (final outputs only)"),
    ("vllm.distributed.weight_transfer.base", "ModuleSource", "NCCL weight sync"),
    ("vllm.distributed.weight_transfer.base", "ParamMeta", "NCCL weight sync (bf16 cast before the gather)"),
    ("vllm.distributed.weight_transfer.factory", "WeightTransferTrainerFactory", "NCCL weight sync"),
    ("vllm.distributed.weight_transfer.clients", "HTTPVLLMWeightSyncClient", "NCCL weight sync to servers"),
    ("vllm.distributed.weight_transfer.nccl_engine", "NCCLTrainerInitInfo", "NCCL weight sync rendezvous"),
    ("vllm.entrypoints.rl.online.api_router", "pause_generation", "servers' /pause?mode=keep around a weight update"),
    ("vllm.v1.engine", "PauseMode", "requests frozen, not drained, during a weight update"),
]
LLM_METHODS = ["generate", "sleep", "wake_up", "collective_rpc", "reset_prefix_cache", "get_tokenizer"]
ENGINE_METHODS = ["add_request", "step", "has_unfinished_requests", "abort_request"]
"""``LLMEngine`` calls of swerl's continuous batching (``swerl/inference/engines/engine_pump.py``)."""


def line(status: str, step: str, value: str, machine: str) -> str:
    return f"{status} {step}: {value} | {machine}"


def step_api(machine: str) -> str:
    """Version in range, every module/attribute in :data:`API`, ``LLM``'s methods, ``wake_up(tags)``
    and ``reload_weights(weights_path=...)``."""
    import importlib
    import inspect

    try:
        import vllm
    except ImportError as err:
        return line("FAIL", "vllm_api", f"vllm not importable ({err}): pip install 'vllm>=0.32,<0.34'", machine)
    version = tuple(int(x) for x in vllm.__version__.split(".")[:2] if x.isdigit())
    missing = [] if VLLM_RANGE[0] <= version < VLLM_RANGE[1] else [f"version {vllm.__version__} outside >=0.32,<0.34"]
    for module, attr, use in API:
        try:
            found = importlib.import_module(module)
            if attr is not None:
                getattr(found, attr)
        except (ImportError, AttributeError) as err:
            missing.append(f"{module}{'.' + attr if attr else ''} ({use}: {type(err).__name__})")
    missing += [f"LLM.{m}" for m in LLM_METHODS if not hasattr(vllm.LLM, m)]
    engine_class = getattr(importlib.import_module("vllm.engine.llm_engine"), "LLMEngine", None)
    missing += [f"LLMEngine.{m} (continuous batching)" for m in ENGINE_METHODS if not hasattr(engine_class, m)]
    if hasattr(vllm.LLM, "wake_up") and "tags" not in inspect.signature(vllm.LLM.wake_up).parameters:
        missing.append("LLM.wake_up(tags=...)")
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        if "weights_path" not in inspect.signature(GPUModelRunner.reload_weights).parameters:
            missing.append("reload_weights(weights_path=...)")
    except (ImportError, AttributeError) as err:
        missing.append(f"GPUModelRunner.reload_weights ({type(err).__name__})")
    value = f"vllm {vllm.__version__}: " + (f"missing {'; '.join(missing)}" if missing else
                                             f"{len(API)} modules, LLM.{'/'.join(LLM_METHODS)}, LLMEngine.{'/'.join(ENGINE_METHODS)}, "
                                             "reload_weights(weights_path)")
    return line("FAIL" if missing else "PASS", "vllm_api", value, machine)


def model_folder(root: Path, layers: int, smoke: bool, seed: int = 0) -> tuple[Path, torch.nn.Module]:
    """An HF folder (Qwen3 layers of the 8B shape, or tiny ones) over the tests' 16-id tokenizer."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    from trainer._support import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    shape = dict(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=64) \
        if smoke else dict(hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8,
                           head_dim=128)
    config = Qwen3Config(vocab_size=len(tokenizer), num_hidden_layers=layers, max_position_embeddings=2048,
                         tie_word_embeddings=False, pad_token_id=0, eos_token_id=5, bos_token_id=None, **shape)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)  # sharp next-token distributions: a weight change moves the log-probs
    folder = root / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def write_new_weights(model: torch.nn.Module, root: Path, dtype: torch.dtype) -> tuple[Path, int, float]:
    """Move every weight by 0.1 of its mean |w| (a training step's worth: the samples change) and
    write them with swerl's disk sync (``write_version``: cast to ``dtype`` first, one shard per
    rank, a fresh folder per version); returns the folder, its bytes and the seconds spent writing."""
    from swerl.inference.weight_sync.disk import write_version

    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * p.abs().mean() * torch.randn(p.shape, generator=gen))
    t0 = time.perf_counter()
    folder, nbytes = write_version(model, root, 1, dtype, "0c0c0c")
    return folder, nbytes, time.perf_counter() - t0


def gap_nats(output, prompt: list[int], model: torch.nn.Module, temperature: float) -> float:
    """Mean |mu - log softmax(logits / T)| of the engine's sampled tokens under the trainer's fp32 model."""
    ids = list(output.token_ids)
    mus = [next(iter(step.values())).logprob if len(step) == 1 else step[token].logprob
           for step, token in zip(output.logprobs, ids)]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float() / temperature
    trainer = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
    return float((torch.tensor(mus) - trainer).abs().mean())


def engine(folder: Path, smoke: bool):
    """A ``vllm.LLM`` on ``folder``: bf16 with sleep mode on CUDA, fp32 in-process on CPU; log-probs
    after temperature (``processed_logprobs``), as swerl's engines return them."""
    import vllm

    if smoke:
        os.environ.update({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                           "VLLM_CPU_OMP_THREADS_BIND": "nobind"})
    kwargs = dict(model=str(folder), dtype="float32" if smoke else "bfloat16", max_model_len=1024, enforce_eager=True,
                  seed=0, gpu_memory_utilization=0.3, enable_prefix_caching=True, max_num_seqs=8,
                  logprobs_mode="processed_logprobs")  # mu of the distribution sampled from, as swerl's engines
    if not smoke:
        kwargs["enable_sleep_mode"] = True
    return vllm.LLM(**kwargs)


def step_engine(args, machine: str) -> list[str]:
    """Steps 2-4 on one engine."""
    import vllm
    from vllm.inputs import TokensPrompt

    smoke = args.smoke
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        folder, model = model_folder(Path(tmp), 2 if smoke else args.layers, smoke)
        llm = engine(folder, smoke)
        prompt = [6, 7, 8, 9, 10, 11]
        params = vllm.SamplingParams(temperature=0.7, max_tokens=16, seed=3, logprobs=0, ignore_eos=True)

        def sample():
            return llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)[0].outputs[0]

        first = sample()
        if smoke:
            out.append(line("SKIP", "vllm_sleep_wake", "vLLM's CPU build has no sleep mode", machine))
        else:
            free = torch.cuda.mem_get_info()[0]
            llm.sleep(level=1)
            freed = torch.cuda.mem_get_info()[0] - free
            llm.wake_up()
            again = sample()
            ok = freed > 0 and list(again.token_ids) == list(first.token_ids)
            out.append(line("PASS" if ok else "FAIL", "vllm_sleep_wake", f"sleep(1) freed {freed / 2**30:.1f} GiB; "
                            f"wake_up() sampled {'the same' if ok else 'OTHER'} {len(first.token_ids)} tokens", machine))
        new, nbytes, write_s = write_new_weights(model, Path(tmp) / "sync", torch.float32 if smoke else torch.bfloat16)
        freed2 = 0
        if not smoke:
            free = torch.cuda.mem_get_info()[0]
            llm.sleep(level=2)
            freed2 = torch.cuda.mem_get_info()[0] - free
            llm.wake_up(tags=["weights"])
        t0 = time.perf_counter()
        llm.collective_rpc("reload_weights", kwargs={"weights_path": str(new)})
        reload_s = time.perf_counter() - t0
        if not smoke:
            llm.wake_up(tags=["kv_cache"])
        llm.reset_prefix_cache()
        stale, gap = gap_nats(first, prompt, model, 0.7), gap_nats(sample(), prompt, model, 0.7)
        ok = gap < PROBE_LIMIT_NATS and stale > 2 * gap
        how = "reload" if smoke else f"sleep(2) freed {freed2 / 2**30:.1f} GiB, wake weights, reload, wake kv_cache"
        out.append(line("PASS" if ok else "FAIL", "vllm_reload_after_sleep", f"{how}: probe gap {gap:.4f} nats "
                        f"(limit {PROBE_LIMIT_NATS}; the old weights' {stale:.4f})", machine))
        rate = nbytes / (write_s + reload_s)
        big = nbytes >= 1e9  # a smaller write measures latency, not a rate: no extrapolation from it
        seed = (f"the seed's {SEED_BF16_BYTES / 1e9:.1f} GB bf16 ~ {SEED_BF16_BYTES / rate:.0f} s" if big else
                "under 1 GB: not extrapolated to the seed")
        out.append(line("PASS" if math.isfinite(rate) and (big or smoke) else "FAIL", "weight_sync_cost",
                        f"{nbytes / 1e9:.2f} GB: write {write_s:.2f} s + reload {reload_s:.2f} s = {rate / 1e9:.2f} GB/s; "
                        f"{seed}", machine))
        del llm
    return out


def step_tests(smoke: bool, machine: str) -> str:
    """``pytest -m vllm tests/inference`` here (CUDA only)."""
    if smoke:
        return line("SKIP", "vllm_tests", "--smoke: the suite runs them on CPU", machine)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "vllm", "-p", "no:cacheprovider",
                           str(ROOT / "tests" / "inference")], capture_output=True, text=True, cwd=ROOT, timeout=330)
    summary = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    return line("PASS" if proc.returncode == 0 else "FAIL", "vllm_tests", summary, machine)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on CPU (the suite runs this)")
    parser.add_argument("--layers", type=int, default=4, help="Qwen3-8B-shaped decoder layers of the engine's model")
    args = parser.parse_args()
    from swerl.trainer.setup.auto import machine_summary

    print("\n".join(machine_summary("cpu" if args.smoke else "cuda")), flush=True)  # CPU/GPU, bf16 probe, auto
    machine = machine_words("cpu" if args.smoke else "cuda")
    api = step_api(machine)
    lines = [api]
    if api.startswith("FAIL") and "not importable" in api:
        lines += [line("FAIL", step, "needs vllm", machine)
                  for step in ("vllm_sleep_wake", "vllm_reload_after_sleep", "weight_sync_cost", "vllm_tests")]
    else:
        lines += step_engine(args, machine)
        lines.append(step_tests(args.smoke, machine))
    for text in lines:
        print(text, flush=True)
    sys.exit(1 if any(text.startswith("FAIL") for text in lines) else 0)


if __name__ == "__main__":
    main()
