"""Worker of ``test_weight_sync.py``, launched once by ``torchrun --nproc_per_node 2`` (gloo, CPU):
the disk sync's per-rank bf16 shards of a replicated and of an FSDP2-sharded tiny model, a sync
whose engines other ranks share (no rank applies before every rank has drained), and the parity
probe's gather when one rank owns no engine and when one rank's probe fails, and the NCCL sync's
weight source walked over the FSDP2-sharded model. Rank 0 writes what
the test checks to OUT/result.json; the shards stay under OUT."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as tdist

sys.path.insert(0, str(Path(__file__).parents[1]))  # tiny_llama
sys.path.insert(0, str(Path(__file__).parent))  # this folder's conftest first

from conftest import build_tiny_model, build_tiny_tokenizer  # noqa: E402

from swerl.errors import InferenceError  # noqa: E402
from swerl.inference.backends.hf import HFBackend  # noqa: E402
from swerl.inference.weight_sync.base import Staged, WeightSync  # noqa: E402
from swerl.inference.weight_sync.disk import write_version  # noqa: E402
from swerl.trainer import distributed  # noqa: E402
from swerl.trainer.config import TrainConfig  # noqa: E402
from swerl.trainer.policy.fsdp import shard_model  # noqa: E402
from swerl.trainer.rollouts.generator import Generator, apply_weights, probe_parity  # noqa: E402

CONFIG = TrainConfig(data={"tasks": "unused"}, agent={"temperature": 0.7, "limits": {"context_window_tokens": 256,
                     "max_new_tokens_per_turn": 64}}, generator={"probe_tokens": 8})


class Probed(WeightSync):
    """Owns the given engines; its apply records when it started (a shared-engine sync)."""

    def __init__(self, engines: list, shared: bool = False) -> None:
        self.engines, self.drain_all_ranks, self.applied_at = engines, shared, 0.0

    def stage(self, model, version):
        return Staged(version)

    def apply(self, staged):
        self.applied_at = time.monotonic()

    def probe_engines(self):
        return self.engines


class Broken:
    """An engine whose generate fails with an error that is not an InferenceError (a bug)."""

    def generate(self, prompts, sampling, seeds=None):
        raise RuntimeError("engine exploded")


def shards(out: Path, name: str) -> None:
    """Replicated and FSDP-sharded writes of the same weights into OUT/NAME-*."""
    info = distributed.init_distributed("cpu")
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer), seed=3)
    write_version(model, out / f"{name}-replicated", 5, torch.bfloat16, "a1b2c3")
    shard_model(model, info, bf16=False)
    if importlib.util.find_spec("vllm") is not None:  # the source is vLLM's class
        nccl_source_walk(model, out, info.rank)
    write_version(model, out / f"{name}-sharded", 6, torch.bfloat16, "a1b2c3")
    write_version(model, out / f"{name}-sharded", 7, torch.bfloat16, "a1b2c3")  # v6 goes: a fresh folder per version


def nccl_source_walk(model: torch.nn.Module, out: Path, rank: int) -> None:
    """What the NCCL sync sends of an FSDP2-sharded model: its weight source's metadata, then one
    walk on every rank (each parameter cast to bf16 on its shard, then all-gathered); rank 0 saves
    both to OUT/nccl_source.pt, with the dtype of the sharded parameters after the walk."""
    from swerl.inference.weight_sync.nccl import cast_source

    source = cast_source(model, torch.bfloat16)
    meta = [(m.name, m.dtype, tuple(m.shape)) for m in source.metadata()]
    walked = {name: tensor.clone() for name, tensor in source}
    kept = {type(p).__name__ + ":" + str(p.dtype) for p in model.parameters()}
    if rank == 0:
        torch.save({"meta": meta, "walked": walked, "kept": kept}, out / "nccl_source.pt")


def drained_then_probed(out: Path) -> dict:
    """The shared-engine barrier and the probe's gather (2 ranks)."""
    info = distributed.init_distributed("cpu")
    rank = info.rank
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer), seed=3)
    engines = [HFBackend(model, tokenizer)] if rank == 0 else []  # rank 1 owns no engine
    sync = Probed(engines, shared=True)
    entered = time.monotonic()
    if rank == 1:
        time.sleep(1.0)  # rank 1 drains its own requests late
        entered = time.monotonic()
    metrics = apply_weights(Generator(HFBackend(model, tokenizer), sync), Staged(1), model, CONFIG, info)
    times = [None, None]
    tdist.all_gather_object(times, (entered, sync.applied_at))
    failed = Generator(HFBackend(model, tokenizer), Probed([Broken()] if rank == 1 else engines))
    try:
        probe_parity(failed, model, CONFIG, info)
        error = "none"
    except InferenceError as err:
        error = f"InferenceError: {err}"
    except RuntimeError as err:
        error = f"RuntimeError: {err}"
    errors = [None, None]
    tdist.all_gather_object(errors, error)
    return {"metrics": metrics, "times": times, "errors": errors}


if __name__ == "__main__":
    out = Path(sys.argv[1])
    shards(out, "tiny")
    result = drained_then_probed(out)
    if tdist.get_rank() == 0:
        (out / "result.json").write_text(json.dumps(result))
    distributed.destroy()
