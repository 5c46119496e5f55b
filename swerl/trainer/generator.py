"""The trainer's side of generation: build this rank's generator, push the new weights to it after
every optimizer step, and run the parity probe that proves the engine samples from them.

Every rank owns a generator (its HF module, its in-process vLLM engine, or its vLLM servers), so
with data parallelism every rank generates its share of a step's episodes. Weight sync paths and
the probe are described in ``docs/inference.md``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from swerl.inference.probe import probe_sampling
from swerl.trainer import checkpoint as ckpt
from swerl.trainer import distributed as dist
from swerl.trainer.config import TrainConfig
from swerl.trainer.distributed import DistInfo

log = logging.getLogger(__name__)

PROBE_MESSAGES = [{"role": "user", "content": "Write a Python function that returns the sum of a list of numbers."}]


def make_generator(
    config: TrainConfig, model: torch.nn.Module, tokenizer: Any, model_path: Path, run_dir: Path, info: DistInfo
) -> Any:
    """This rank's rollout backend.

    ``hf``: generates with the live policy module (no weight copy). ``vllm``: an in-process engine, or
    this rank's servers (on GPU, local rank k starts its servers on GPUs ``k*num_servers ...``; on
    CPU the trainer then keeps only the cores the servers do not use).

    Raises:
        ConfigError: ``weight_sync=nccl`` on CPU. EnvironmentProblem: vLLM missing or a server down.
    """
    gen = config.generator
    if gen.backend == "hf":
        from swerl.inference.hf import HFBackend

        if gen.num_threads is not None:  # CPU: leave cores to the sandboxes' verifiers
            torch.set_num_threads(gen.num_threads)
        return HFBackend(model, tokenizer, seed=gen.seed)
    from swerl.inference.factory import build_vllm, engine_cores, parse_cores
    from swerl.inference.weight_sync import check_nccl_supported

    on_cpu = info.device.type == "cpu"
    if gen.weight_sync == "nccl":
        check_nccl_supported(on_cpu)
    gpus = None if on_cpu else [info.local_rank * gen.num_servers + k for k in range(gen.num_servers)]
    backend = build_vllm(gen, str(model_path), run_dir / "logs" / f"rank{info.rank}", gpus=gpus)
    if gen.weight_sync == "nccl":  # GPU servers only; each rank feeds its own servers
        from swerl.inference.vllm_server import free_port
        from swerl.inference.weight_sync import NcclWeightSender

        backend.nccl_senders = [NcclWeightSender(e.url, model, 0, 2, free_port()) for e in backend.engines]
    if on_cpu and gen.vllm_mode == "servers" and not gen.server_urls:
        available = sorted(os.sched_getaffinity(0))
        taken = {core for cores in engine_cores(gen, available) if cores for core in parse_cores(cores)}
        rest = [core for core in available if core not in taken] or available
        os.sched_setaffinity(0, rest)
        torch.set_num_threads(len(rest))
        log.info("trainer on cores %s; vLLM servers on %s", rest, sorted(taken))
    return backend


def probe_prompt(tokenizer: Any) -> list[int]:
    """The fixed prompt of the parity probe (a short chat turn through the policy's template)."""
    return list(tokenizer.apply_chat_template(PROBE_MESSAGES, add_generation_prompt=True, tokenize=True,
                                              return_dict=False))


def weights_dir(config: TrainConfig, run_dir: Path) -> Path:
    """The shared folder the trainer writes weights to and every engine reloads from."""
    return Path(config.generator.weight_sync_dir) if config.generator.weight_sync_dir else run_dir / "weight_sync"


def write_sync_weights(model: torch.nn.Module, config: TrainConfig, run_dir: Path, info: DistInfo, version: int) -> Path:
    """vLLM ``disk`` sync, first half: rank 0 writes the trainer's weights as one safetensors file
    (engine dtype, atomically) to :func:`weights_dir`; every rank waits for it.

    Returns:
        the folder the engines reload (pass it to :func:`sync_generator` as ``written``).
    """
    from swerl.inference.weight_sync import write_weights

    state = ckpt.full_model_state_dict(model)  # collective under FSDP
    folder = weights_dir(config, run_dir)
    if info.is_main:
        write_weights(state, folder, getattr(torch, config.generator.resolved_dtype()), version)
    dist.barrier()
    return folder


def sync_generator(
    backend: Any, model: torch.nn.Module, config: TrainConfig, run_dir: Path, info: DistInfo, version: int,
    written: Path | None = None,
) -> dict[str, float]:
    """Give every engine the trainer's current weights as policy ``version``, then probe parity.

    HF: the module is shared, only the version moves. vLLM ``disk``: rank 0 writes one safetensors
    file (engine dtype) to :func:`weights_dir`, all ranks wait, each rank's engines reload it;
    ``written`` is that folder when :func:`write_sync_weights` already wrote ``version`` there.

    Returns:
        the probe's metrics (``inference/logprob_diff_mean``, ``inference/logprob_diff_max``) plus
        ``timing/weight_sync_s``, averaged/maxed over ranks.

    Raises:
        InferenceError: the probe's mean gap exceeds ``generator.logprob_diff_limit`` (stops the run).
    """
    import time

    start = time.monotonic()
    if getattr(backend, "model", None) is model:
        backend.set_model(model)
        backend.weight_version = version
    elif getattr(backend, "nccl_senders", None):
        for sender, engine in zip(backend.nccl_senders, backend.engines, strict=True):
            sender.send()
            engine.post("reset_prefix_cache")
        backend.weight_version = version
    else:
        folder = written if written is not None else write_sync_weights(model, config, run_dir, info, version)
        backend.reload_weights(str(folder), version)
    sync_s = time.monotonic() - start
    return {**probe_parity(backend, model, config, info), "timing/weight_sync_s": sync_s}


def probe_parity(backend: Any, model: torch.nn.Module, config: TrainConfig, info: DistInfo) -> dict[str, float]:
    """Parity probe on this rank's engines (fixed prompt and seed, top-p 1, top-k off), reduced over
    ranks: mean of the means, max of the maxima.

    Every rank samples on its own engines, then the samples' ids are gathered and, under FSDP,
    every rank re-scores ALL ranks' samples (one forward each, on ``info.device``, even for an
    empty or failed sample): a forward of a sharded model is a collective, so every rank must run
    as many, whatever its engines returned. Results travel over the gloo group.

    Raises:
        InferenceError: on every rank, when any rank's engine failed or is above ``generator.logprob_diff_limit``.
    """
    from swerl.errors import InferenceError
    from swerl.inference.base import Generation
    from swerl.inference.probe import gap_metrics, rescore, sample_engines

    sampling = probe_sampling(config.agent.temperature, config.generator.probe_tokens)
    prompt = probe_prompt(backend.tokenizer)
    was_training = model.training
    model.eval()
    try:
        samples = sample_engines(backend, prompt, sampling)
        ids = [[] if isinstance(s, str) else s.token_ids for s in samples]
        every = dist.all_gather_objects(ids) if config.model.fsdp else [ids]
        by_rank = [[rescore(model, prompt, Generation(token_ids=t, logprobs=None, finish_reason="stop"), sampling,
                            info.device) for t in rank_ids] for rank_ids in every]
        rescored = by_rank[info.rank if config.model.fsdp else 0]
        local: dict[str, float] | str = gap_metrics(samples, rescored, config.generator.logprob_diff_limit)
    except InferenceError as err:
        local = str(err)
    finally:
        model.train(was_training)
    results = dist.all_gather_objects(local)
    for rank, result in enumerate(results):
        if isinstance(result, str):
            raise InferenceError(f"rank {rank}: {result}")
    return {
        "inference/logprob_diff_mean": sum(r["inference/logprob_diff_mean"] for r in results) / len(results),
        "inference/logprob_diff_max": max(r["inference/logprob_diff_max"] for r in results),
    }


def close_generator(backend: Any) -> None:
    """Stop what the generator owns (servers swerl started, in-process engines)."""
    close = getattr(backend, "close", None)
    if close is not None and getattr(backend, "model", None) is None:
        close()
