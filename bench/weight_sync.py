"""Seconds and bytes per weight sync by path and model size (what the trainer pays after every
optimizer step), full fine-tuning vs LoRA.

A full sync = write the trainer's state dict as one safetensors file (engine dtype) + every engine
reloads it in place (+ tied-head re-pack) + prefix-cache reset. A LoRA sync = write the peft
adapter folder (rank 16 on every linear, bf16) + the engine loads it as a new adapter (``AdapterSync``).
Paths: ``disk-inprocess`` / ``adapter-inprocess`` (``vllm.LLM`` in this process), ``disk-server`` /
``adapter-server`` (one vLLM server over HTTP). ``nccl`` needs CUDA GPUs and is reported as
unavailable on CPU. Sizes: the default SmolLM2-135M and a random-weight Llama built from a config
(``--big-layers`` layers of width 1024, ~0.4B params at 24).
Engine dtype: ``--dtype`` (default auto: what ``generator.dtype`` resolves to here).
Prints the machine (CPU, bf16 probe, auto resolution), then ``<path>-<size>: <seconds> s/sync, <MB> MB/sync`` (median of
``--repeats``). Run alone, under the lock.
Usage: python bench/weight_sync.py [--paths disk-inprocess,adapter-inprocess] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def big_model_folder(root: Path, layers: int) -> Path:
    """A random Llama (hidden 1024, ``layers`` layers, SmolLM2's tokenizer) saved as an HF folder."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from swerl.inference.model_files import resolve_model

    config = LlamaConfig(vocab_size=49152, hidden_size=1024, intermediate_size=4096, num_hidden_layers=layers,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                         tie_word_embeddings=True)
    folder = root / f"llama-{layers}l"
    LlamaForCausalLM(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_model(None)).save_pretrained(folder)
    return folder


LORA_RANK = 16


def seconds_per_sync(path: str, folder: Path, repeats: int, work: Path, dtype: str) -> tuple[float, int]:
    """(median seconds, bytes) of one sync along ``path`` of the model in ``folder`` (engine ``dtype``)."""
    from transformers import AutoModelForCausalLM

    from swerl.inference.config import VLLMGenerator
    from swerl.inference.factory import build_vllm
    from swerl.inference.weight_sync.adapter import write_adapter
    from swerl.inference.weight_sync.disk import write_weights
    from swerl.trainer.config import LoraConfig
    from swerl.trainer.policy.lora import add_adapters

    lora = path.startswith("adapter")
    config = VLLMGenerator(dtype=dtype, enforce_eager=True, max_model_len=1024,
                             max_num_seqs=4, cpu_cores=["0"], kv_cache_space_gib=1,
                             vllm_mode="inprocess" if path.endswith("inprocess") else "servers")
    trainer = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if lora:
        trainer = add_adapters(trainer, LoraConfig(rank=LORA_RANK, alpha=2.0 * LORA_RANK))
    engine = build_vllm(config, str(folder), work / "logs", max_lora_rank=LORA_RANK if lora else None)
    times, num_bytes = [], 0
    try:
        for version in range(1, repeats + 1):
            start = time.perf_counter()
            if lora:
                out = work / "sync" / f"v{version}"
                num_bytes = write_adapter(trainer, out, getattr(torch, dtype), str(folder))
                engine.load_adapter(f"bench-v{version}", str(out), version)
            else:
                out = write_weights(trainer.state_dict(), work / "sync", getattr(torch, dtype), version)
                num_bytes = (out / "model.safetensors").stat().st_size
                engine.reload_weights(str(out), version)
            times.append(time.perf_counter() - start)
    finally:
        engine.close()
    return statistics.median(times), num_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", default="disk-inprocess,adapter-inprocess,disk-server,adapter-server,nccl")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--big-layers", type=int, default=24, help="0 = only the default model")
    parser.add_argument("--dtype", default="auto", choices=["bfloat16", "float32", "auto"])
    parser.add_argument("--one", nargs=2, metavar=("PATH", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    from swerl.trainer.setup.auto import machine_choice, machine_summary, vllm_dtype_for

    dtype = vllm_dtype_for(machine_choice("cpu")[0]) if args.dtype == "auto" else args.dtype
    if args.one:  # one engine per process: a second in-process vLLM engine in one process is not supported
        path, folder = args.one
        work = Path(tempfile.mkdtemp(prefix="swerl-bench-sync-"))
        seconds, num_bytes = seconds_per_sync(path, Path(folder), args.repeats, work, dtype)
        print(f"{seconds:.3f} {num_bytes}")
        return
    print("\n".join(machine_summary()), flush=True)
    print(f"engine dtype: {dtype}" + (" (auto)" if args.dtype == "auto" else ""), flush=True)
    from swerl.inference.model_files import resolve_model

    work = Path(tempfile.mkdtemp(prefix="swerl-bench-sync-"))
    sizes = {"135M": resolve_model(None)}
    if args.big_layers:
        folder = big_model_folder(work, args.big_layers)
        sizes[f"{_num_params(folder) / 1e9:.2f}B"] = folder
    for path in args.paths.split(","):
        for size, folder in sizes.items():
            if path == "nccl":
                if not torch.cuda.is_available():
                    print(f"nccl-{size}: unavailable (no CUDA; vLLM's CPU build has no NCCL weight transfer)")
                    continue
                raise SystemExit("nccl on GPU: run the GPU check instead (needs servers with --weight-transfer-config)")
            argv = [sys.executable, __file__, "--one", path, str(folder), "--repeats", str(args.repeats), "--dtype", dtype]
            result = subprocess.run(argv, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise SystemExit(f"{path}-{size} failed:\n{result.stderr[-2000:]}")
            seconds, num_bytes = result.stdout.split()[-2:]
            print(f"{path}-{size}: {float(seconds):.3f} s/sync, {int(num_bytes) / 1e6:.1f} MB/sync", flush=True)


def _num_params(folder: Path) -> int:
    import math

    from safetensors import safe_open

    total = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), "pt") as handle:
            total += sum(math.prod(handle.get_slice(key).get_shape()) for key in handle.keys())
    return total


if __name__ == "__main__":
    main()
