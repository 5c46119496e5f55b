"""The trainer's side of generation: build this rank's generator (its engines and the weight sync
their type calls for), publish the new weights to it after every optimizer step, and run the parity
probe that proves the engines sample from them.

Every rank generates its share of a step's episodes with its own engines (its HF module, its
in-process vLLM engine, its vLLM servers) or with servers all ranks share (``server_urls``), each
of which then has one owner rank that reloads and probes it. Weight sync and the probe are
described in ``docs/inference.md``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from swerl import metric_keys
from swerl.inference.engines.engine_pool import EnginePool
from swerl.inference.backends.hf import HFBackend
from swerl.inference.config import HFGenerator
from swerl.inference.weight_sync.base import Staged, WeightSync, owned_indices
from swerl.run_layout import ENGINE_LOGS_DIR, WEIGHT_SYNC_DIR
from swerl.trainer import distributed as dist
from swerl.trainer.config import TrainConfig
from swerl.trainer.distributed import DistInfo

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from swerl.inference.backends.base import SamplingParams
    from swerl.inference.engines.vllm_backend import VLLMBackend

log = logging.getLogger(__name__)

PROBE_MESSAGES = [{"role": "user", "content": "Write a Python function that returns the sum of a list of numbers."}]


@dataclass
class Generator:
    """This rank's generation engines and the way trained weights reach them.

    Attributes:
        backend: what episodes sample from (``HFBackend``, ``VLLMBackend`` or an ``EnginePool``).
        sync: the :class:`WeightSync` for ``backend``'s type (``attach_sync``).
        sleeps_during_update: a colocated in-process vLLM engine on GPU with sleep mode: it sleeps
            (``sync.sleep_level``) while the trainer updates and :meth:`WeightSync.apply` wakes it.
        owns_backend: :func:`close_generator` closes the backend (False: someone else's engines).
    """

    backend: HFBackend | VLLMBackend | EnginePool
    sync: WeightSync
    sleeps_during_update: bool = False
    owns_backend: bool = True

    def sleep_for_update(self) -> None:
        """Free the GPU memory of a colocated engine before the update (no-op otherwise)."""
        if self.sleeps_during_update:
            self.backend.sleep(self.sync.sleep_level)


def local_world_size() -> int:
    """Trainer ranks on this node (torchrun's ``LOCAL_WORLD_SIZE``; 1 without torchrun)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def make_generator(
    config: TrainConfig, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, model_path: Path, run_dir: Path,
    info: DistInfo,
) -> Generator:
    """This rank's generator.

    ``hf``: generates with the live policy module (no weight copy). ``vllm``: an in-process engine,
    this rank's servers (on GPU on GPUs of their own, after the node's trainer GPUs among the visible
    ones; on CPU the trainer then keeps only the cores the servers do not use), or the shared
    ``server_urls``.

    Raises:
        ConfigError: ``weight_sync=nccl`` on CPU, or a colocated engine with async rollouts on GPU.
        EnvironmentProblem: vLLM missing, a server down or lacking a route, too few GPUs.
    """
    from swerl.trainer.policy.lora import hf_module

    gen = config.generator
    if isinstance(gen, HFGenerator):
        if gen.num_threads is not None:  # CPU: leave cores to the sandboxes' verifiers
            torch.set_num_threads(gen.num_threads)
        # the transformers model inside a peft policy generates WITH its live adapters
        return attach_sync(HFBackend(hf_module(model), tokenizer, seed=gen.seed), config, model, run_dir, info)
    from swerl.inference.factory import build_vllm, engine_cores, parse_cores
    from swerl.inference.engines.gpu_placement import server_gpus, visible_gpus
    from swerl.inference.weight_sync.nccl import check_nccl_supported

    on_cpu = info.device.type == "cpu"
    if gen.weight_sync == "nccl":
        check_nccl_supported(on_cpu)
    check_colocation(config, on_cpu)
    gpus = None
    if not on_cpu and gen.vllm_mode == "servers" and not gen.server_urls:
        visible = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count())
        gpus = server_gpus(visible, info.local_rank, local_world_size(), gen.num_servers)
    lora_rank = config.model.lora.rank if config.model.lora is not None else None
    backend = build_vllm(gen, str(model_path), run_dir / ENGINE_LOGS_DIR / f"rank{info.rank}", gpus=gpus, max_lora_rank=lora_rank)
    if on_cpu and gen.vllm_mode == "servers" and not gen.server_urls:
        available = sorted(os.sched_getaffinity(0))
        taken = {core for cores in engine_cores(gen, available) if cores for core in parse_cores(cores)}
        rest = [core for core in available if core not in taken] or available
        os.sched_setaffinity(0, rest)
        torch.set_num_threads(len(rest))
        log.info("trainer on cores %s; vLLM servers on %s", rest, sorted(taken))
    return attach_sync(backend, config, model, run_dir, info)


def check_colocation(config: TrainConfig, on_cpu: bool) -> None:
    """Refuse, on GPU, an in-process engine (it shares the rank's GPU) with async rollouts: it would
    have to generate while the trainer updates on the same GPU (``auto`` devices resolve here).

    Raises:
        ConfigError: one line naming the two fields and the fixes.
    """
    from swerl.errors import ConfigError
    from swerl.trainer.colocation import colocation_problem

    problem = colocation_problem(config.generator, config.loop.max_staleness_steps, on_gpu=not on_cpu)
    if problem is not None:
        raise ConfigError(problem)


def attach_sync(backend: HFBackend | VLLMBackend | EnginePool, config: TrainConfig, model: torch.nn.Module,
                run_dir: Path, info: DistInfo, owns_backend: bool = True) -> Generator:
    """``backend`` with the weight sync its type calls for (checked against the engines' APIs).

    ``HFBackend`` -> ``ModuleShare``; ``VLLMBackend`` or ``EnginePool`` -> ``AdapterSync`` for a LoRA
    policy (a ``peft.PeftModel``), else ``DiskReload`` (or ``NcclBroadcast`` with ``weight_sync=nccl``;
    ``auto`` is resolved to one of them by the preflight, ``trainer/setup/sync_auto.py``).
    Servers named in ``server_urls`` are shared by every rank: server i is reloaded and probed by
    rank ``i % W`` only.

    Raises:
        TypeError: a backend no sync is written for. EnvironmentProblem: an engine lacks an API.
        ValueError: ``weight_sync`` still ``auto`` (the config skipped the preflight: a bug).
    """
    from swerl.inference.engines.vllm_backend import VLLMBackend

    gen = config.generator
    if isinstance(backend, HFBackend):
        from swerl.inference.weight_sync.module_share import ModuleShare

        return Generator(backend, ModuleShare(backend), owns_backend=owns_backend)
    if not isinstance(backend, (VLLMBackend, EnginePool)):
        raise TypeError(f"no weight sync for a generator backend of type {type(backend).__name__}")
    if gen.weight_sync == "auto":  # the preflight resolves it (trainer/setup/sync_auto.py) before servers start
        raise ValueError("generator.weight_sync=auto reached the generator unresolved: resolve_auto(config) first")
    engines = backend.engines if isinstance(backend, EnginePool) else [backend]
    shared = bool(gen.server_urls) and info.world_size > 1
    owned = owned_indices(len(engines), info.rank, info.world_size, shared)
    dtype = getattr(torch, gen.resolved_dtype())
    from swerl.trainer.policy.lora import is_lora

    if is_lora(model):
        from swerl.inference.weight_sync.adapter import AdapterSync

        sync: WeightSync = AdapterSync(engines, owned, weights_dir(config, run_dir), dtype, None, shared)
    elif gen.weight_sync == "nccl":
        from swerl.inference.engines.server_process import free_port
        from swerl.inference.weight_sync.nccl import NcclBroadcast

        sync = NcclBroadcast(engines, owned, model, dtype, sync_address(config),
                                         [free_port() for _ in owned], shared)
    else:
        from swerl.inference.weight_sync.disk import DiskReload

        sync = DiskReload(engines, owned, weights_dir(config, run_dir), dtype, shared)
    sync.check()
    sleeps = isinstance(backend, VLLMBackend) and not backend.on_cpu and gen.enable_sleep_mode
    return Generator(backend, sync, sleeps_during_update=sleeps, owns_backend=owns_backend)


def sync_address(config: TrainConfig) -> str:
    """Where vLLM servers reach this rank's NCCL rendezvous: ``generator.weight_sync_address``, else
    loopback for servers swerl starts on this node, this host's name for ``server_urls``."""
    import socket

    gen = config.generator
    if gen.weight_sync_address:
        return gen.weight_sync_address
    return socket.getfqdn() if gen.server_urls else "127.0.0.1"


def weights_dir(config: TrainConfig, run_dir: Path) -> Path:
    """The shared folder the trainer writes weights to and every engine reloads from."""
    return Path(config.generator.weight_sync_dir) if config.generator.weight_sync_dir else run_dir / WEIGHT_SYNC_DIR


def probe_prompt(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The fixed prompt of the parity probe (a short chat turn through the policy's template)."""
    return list(tokenizer.apply_chat_template(PROBE_MESSAGES, add_generation_prompt=True, tokenize=True,
                                              return_dict=False))


def publish_weights(
    generator: Generator, model: torch.nn.Module, config: TrainConfig, info: DistInfo, version: int
) -> dict[str, float]:
    """Give this rank's engines the trainer's current weights as policy ``version``, then probe
    parity; every rank calls it at the same step, with no request of its own in flight (the
    synchronous loop, a resume). The rollout pipeline calls the two halves itself: ``sync.stage``
    while the engines generate, :func:`apply_weights` once its requests are drained.

    Returns:
        the probe's metrics (``inference/logprob_diff_mean``, ``inference/logprob_diff_max``) plus
        ``timing/weight_sync_s`` (stage + apply, seconds) and ``inference/weight_sync_bytes`` (bytes of
        the version shipped to one engine: 0 for the live HF module, the adapters with LoRA).

    Raises:
        InferenceError: the probe's mean gap exceeds ``generator.logprob_diff_limit`` (stops the run).
    """
    return apply_weights(generator, generator.sync.stage(model, version), model, config, info)


def apply_weights(generator: Generator, staged: Staged, model: torch.nn.Module, config: TrainConfig,
                  info: DistInfo, probe: bool = True) -> dict[str, float]:
    """The engines take ``staged`` and are probed (``probe``; no request of this rank running: drained,
    or frozen by a pause, in which case the caller probes after resuming them). Shared servers
    (``drain_all_ranks``) wait until every rank has drained before any reload, and until every
    reload is done before any rank sends again, so no request of any rank straddles one; that
    first wait is ``timing/weight_sync_wait_s`` (seconds). Returns and raises as :func:`publish_weights`."""
    shared = generator.sync.drain_all_ranks
    t0 = time.monotonic()
    if shared:
        dist.barrier()
    waited = time.monotonic() - t0
    generator.sync.apply(staged)
    if shared:
        dist.barrier()
    applied = time.monotonic() - t0 - waited
    metrics = {**(probe_parity(generator, model, config, info) if probe else {}),
               metric_keys.TIMING_WEIGHT_SYNC_S: staged.stage_s + applied,
               metric_keys.INFERENCE_WEIGHT_SYNC_BYTES: float(staged.num_bytes)}
    return {**metrics, metric_keys.TIMING_WEIGHT_SYNC_WAIT_S: waited} if shared else metrics


def probe_parity(generator: Generator, model: torch.nn.Module, config: TrainConfig, info: DistInfo) -> dict[str, float]:
    """Parity probe on the engines this rank owns (fixed prompt and seed, top-p 1, top-k off),
    reduced over ranks: the token-weighted mean of the means, the max of the maxima. A rank that
    owns no engine, or whose engines sampled no token, contributes nothing; every rank reaches the
    gather whatever happened locally, so one rank's failure stops all of them instead of hanging them.

    Every rank samples on its own engines, then the samples' ids are gathered and, under FSDP,
    every rank re-scores ALL ranks' samples (one forward each, on ``info.device``, even for an
    empty or failed sample): a forward of a sharded model is a collective, so every rank must run
    as many, whatever its engines returned. Results travel over the gloo group.

    Raises:
        InferenceError: on every rank, when any rank's engine failed or is above
            ``generator.logprob_diff_limit``. A probe that failed otherwise (a bug) re-raises its own
            error on its rank after the gather; the other ranks stop with an InferenceError naming it.
    """
    from swerl.errors import InferenceError
    from swerl.inference.probe import gap_metrics, probe_sampling, sample_engines

    sampling = probe_sampling(config.agent.temperature, config.generator.probe_tokens)
    prompt = probe_prompt(generator.backend.tokenizer)
    was_training, error = model.training, None
    model.eval()
    try:
        try:
            samples = sample_engines(generator.sync.probe_engines(), prompt, sampling)
        except Exception as err:  # noqa: BLE001 - gathered so that no rank waits for this one forever
            error, samples = err, [f"logprob probe: {type(err).__name__}: {err}"]
        rescored = rescore_everywhere(model, prompt, samples, sampling, info, config.model.fsdp)
        local: dict[str, float] | str = gap_metrics(samples, rescored, config.generator.logprob_diff_limit)
    except InferenceError as err:
        local = str(err)
    finally:
        model.train(was_training)
    results = dist.all_gather_objects(local)
    if error is not None:
        raise error
    for rank, result in enumerate(results):
        if isinstance(result, str):
            raise InferenceError(f"rank {rank}: {result}")
    return reduce_probes(results)


def rescore_everywhere(model: torch.nn.Module, prompt: list[int], samples: list, sampling: SamplingParams,
                       info: DistInfo, fsdp: bool) -> list[torch.Tensor]:
    """The trainer's log-probs of this rank's probe samples, computed on ``info.device``.

    Under FSDP a forward is a collective, so the samples' ids are gathered and every rank runs one
    forward per sample of EVERY rank (a failed or empty sample is still forwarded, with no token),
    keeping its own; replicated, each rank scores only its own.

    Returns: one (T_i,) float32 tensor per entry of ``samples`` (empty for a failed sample).
    """
    from swerl.inference.backends.base import Generation
    from swerl.inference.probe import rescore

    ids = [[] if isinstance(sample, str) else sample.token_ids for sample in samples]
    every = dist.all_gather_objects(ids) if fsdp else [ids]
    by_rank = [[rescore(model, prompt, Generation(token_ids=t, logprobs=None, finish_reason="stop"), sampling,
                        info.device) for t in rank_ids] for rank_ids in every]
    return by_rank[info.rank if fsdp else 0]


def reduce_probes(results: list[dict[str, float]]) -> dict[str, float]:
    """Every rank's probe metrics -> the run's: mean weighted by probe tokens, max of maxima."""
    tokens = sum(r[metric_keys.INFERENCE_PROBE_TOKENS] for r in results)
    weighted = sum(r[metric_keys.INFERENCE_LOGPROB_DIFF_MEAN] * r[metric_keys.INFERENCE_PROBE_TOKENS] for r in results)
    mean = weighted / tokens if tokens else 0.0
    return {metric_keys.INFERENCE_LOGPROB_DIFF_MEAN: mean,
            metric_keys.INFERENCE_LOGPROB_DIFF_MAX: max(r[metric_keys.INFERENCE_LOGPROB_DIFF_MAX] for r in results)}


def close_generator(generator: Generator) -> None:
    """Release the sync and stop what the generator owns (servers swerl started, in-process engines)."""
    from swerl.inference.engines.vllm_backend import VLLMBackend

    generator.sync.close()
    if generator.owns_backend and isinstance(generator.backend, (VLLMBackend, EnginePool)):
        generator.backend.close()
