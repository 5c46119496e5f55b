"""vLLM generation backend: an in-process engine (``external_launcher``) sharing the trainer's GPU,
processed sampling log-probs, in-place weight sync, and a sleep/wake state machine.

Follows the "Recommended design" of ``shared/spec/vllm.md``. vLLM is imported lazily (extra
``swerl[gpu]``). Everything that can be checked without vLLM lives in pure helpers at the top
(engine kwargs, sampling kwargs, output conversion, loaded-names check, RNG save/restore,
:class:`EngineState`), so CPU tests exercise the adapter logic on real Python objects.
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from swerl.errors import ConfigError, EnvironmentProblem, InferenceError
from swerl.inference.base import Generation, SamplingParams
from swerl.inference.config import InferenceConfig
from swerl.inference.rng import restore_rng_state, save_rng_state

log = logging.getLogger(__name__)

GPU_FIX = "pip install 'swerl[gpu]' (vllm>=0.26,<0.34) on a CUDA machine"


# ---- pure helpers ---------------------------------------------------------------------------


def engine_kwargs(config: InferenceConfig, model_path: str) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM(...)`` for a colocated, in-process engine (vllm.md §1-2).

    Returns:
        dict with ``distributed_executor_backend="external_launcher"`` (engine in our process),
        ``logprobs_mode="processed_logprobs"`` (mu of the distribution sampled from),
        ``enable_sleep_mode``, ``dtype`` (bf16 by default = trainer dtype), memory knobs and seed.
    """
    kwargs: dict[str, Any] = {
        "model": model_path,
        "dtype": config.resolved_dtype(),
        "distributed_executor_backend": "external_launcher",
        "enable_sleep_mode": config.enable_sleep_mode,
        "logprobs_mode": "processed_logprobs",
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "max_model_len": config.max_model_len,
        "max_num_seqs": config.max_num_seqs,
        "enable_prefix_caching": config.enable_prefix_caching,
        "enforce_eager": config.enforce_eager,
        "seed": config.seed,
        "tensor_parallel_size": 1,
    }
    if config.max_num_batched_tokens is not None:
        kwargs["max_num_batched_tokens"] = config.max_num_batched_tokens
    if config.fp32_lm_head:
        kwargs["hf_overrides"] = {"head_dtype": "float32"}
    return kwargs


def check_alloc_conf(alloc_conf: str | None, sleep_mode: bool) -> None:
    """Refuse ``expandable_segments:True`` with sleep mode (vLLM's CuMemAllocator asserts on it).

    Raises:
        ConfigError: ``PYTORCH_CUDA_ALLOC_CONF`` enables expandable segments while sleep mode is on.
    """
    if not sleep_mode or not alloc_conf:
        return
    options = {part.split(":", 1)[0].strip(): part.split(":", 1)[-1].strip() for part in alloc_conf.split(",")}
    if options.get("expandable_segments", "").lower() == "true":
        raise ConfigError(
            "PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True, which vLLM sleep mode forbids; "
            "fix: unset it or set inference.enable_sleep_mode=false"
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
    """Keyword arguments of ``vllm.SamplingParams``: every field explicit (vllm.md §3).

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


def generation_from_output(request_output: Any, weight_version: int) -> Generation:
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
        token_ids=token_ids, logprobs=logprobs, finish_reason=completion.finish_reason, weight_version=weight_version
    )


def check_all_loaded(loaded: Iterable[str], parameters: Iterable[str]) -> None:
    """Require that a weight sync rewrote every engine parameter (mandatory after level-2 sleep).

    Raises:
        InferenceError: naming up to 5 parameters that were not loaded.
    """
    missing = sorted(set(parameters) - set(loaded))
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise InferenceError(f"weight sync left {len(missing)} vLLM parameters stale: {shown}; send all weights")


@dataclass(frozen=True)
class EngineState:
    """Where the engine's weights and KV cache are (vllm.md §4 "Sleep"); transitions return new states.

    Attributes:
        weights_on_gpu: weight pool allocated on the GPU.
        weights_valid: the weights hold the policy (False after level-2 sleep until a full load).
        kv_on_gpu: KV cache allocated.
    """

    weights_on_gpu: bool = True
    weights_valid: bool = True
    kv_on_gpu: bool = True

    @property
    def name(self) -> str:
        """``awake``, ``asleep_l1``, ``asleep_l2_weights_invalid`` or ``waking`` (part woken)."""
        if self.weights_on_gpu and self.weights_valid and self.kv_on_gpu:
            return "awake"
        if not self.weights_on_gpu and not self.kv_on_gpu:
            return "asleep_l1" if self.weights_valid else "asleep_l2_weights_invalid"
        return "waking"

    @property
    def can_generate(self) -> bool:
        return self.name == "awake"

    def sleep(self, level: int) -> EngineState:
        """Level 1 offloads weights to CPU (kept valid); level 2 discards them. KV is dropped."""
        if level not in (1, 2):
            raise InferenceError(f"vLLM sleep level must be 1 or 2, got {level}")
        if self.name != "awake":
            raise InferenceError(f"cannot sleep: engine is {self.name}, not awake")
        return EngineState(weights_on_gpu=False, weights_valid=level == 1, kv_on_gpu=False)

    def wake(self, tags: Iterable[str]) -> EngineState:
        """Wake ``weights`` and/or ``kv_cache``; waking the KV needs valid weights first."""
        tags = set(tags)
        if unknown := tags - {"weights", "kv_cache"}:
            raise InferenceError(f"unknown wake tags {sorted(unknown)}; use 'weights' and/or 'kv_cache'")
        state = self
        if "weights" in tags:
            state = replace(state, weights_on_gpu=True)
        if "kv_cache" in tags:
            if not state.weights_valid:
                raise InferenceError("refusing to wake the KV cache over discarded weights; load all weights first")
            state = replace(state, kv_on_gpu=True)
        return state

    def loaded_all_weights(self) -> EngineState:
        """A full weight load makes the weights valid again; needs the weight pool awake."""
        if not self.weights_on_gpu:
            raise InferenceError("cannot load weights while they sleep; wake tags=['weights'] first")
        return replace(self, weights_valid=True)


# ---- the backend ----------------------------------------------------------------------------


def import_vllm() -> Any:
    """``import vllm`` or a one-line :class:`EnvironmentProblem` with the fix."""
    try:
        import vllm
    except ImportError as err:
        raise EnvironmentProblem(f"backend 'vllm' needs the vllm package ({err}); fix: {GPU_FIX}") from err
    return vllm


class VLLMBackend:
    """In-process vLLM engine implementing ``GenerationBackend`` plus weight sync and sleep/wake.

    Attributes:
        llm: the ``vllm.LLM``; tokenizer: its tokenizer; weight_version: bumped per sync;
        state: the :class:`EngineState`.

    Raises (construction):
        EnvironmentProblem: vLLM missing. ConfigError: ``expandable_segments:True`` with sleep mode.
    """

    def __init__(self, config: InferenceConfig, model_path: str) -> None:
        vllm = import_vllm()
        check_alloc_conf(os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), config.enable_sleep_mode)
        for key, value in rendezvous_defaults(os.environ).items():
            os.environ[key] = value
        self.config = config
        self.weight_version = 0
        self.state = EngineState()
        self._vllm = vllm
        rng = save_rng_state()
        try:
            self.llm = vllm.LLM(**engine_kwargs(config, model_path))
        finally:
            restore_rng_state(rng)
        self.tokenizer = self.llm.get_tokenizer()
        self._parameter_names = set(self.llm.apply_model(lambda model: [n for n, _ in model.named_parameters()])[0])

    def generate(
        self, prompts: list[list[int]], sampling: SamplingParams, seeds: list[int | None] | None = None
    ) -> list[Generation]:
        """Sample one continuation per prompt (token ids in, token ids + processed mu out).

        Raises:
            InferenceError: the engine is not awake with valid weights, or an output is unusable.
        """
        if not self.state.can_generate:
            raise InferenceError(f"vLLM engine is {self.state.name}; wake it (and sync weights) before generating")
        if not prompts:
            return []
        from vllm.inputs import TokensPrompt

        row_seeds = seeds if seeds is not None else [sampling.seed] * len(prompts)
        params = [self._vllm.SamplingParams(**sampling_kwargs(sampling, seed)) for seed in row_seeds]
        requests = [TokensPrompt(prompt_token_ids=list(prompt)) for prompt in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        return [generation_from_output(output, self.weight_version) for output in outputs]

    def update_weights(self, named_tensors: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> int:
        """Copy the trainer's weights (HF names) into the engine in place, then reset the prefix cache.

        Wakes ``weights`` if asleep, loads through ``model.load_weights`` (fuses q/k/v, gate/up),
        requires every engine parameter rewritten, wakes ``kv_cache``, resets the prefix cache and
        bumps ``weight_version``. Never calls ``reload_weights`` (it would re-read the disk checkpoint).

        Returns:
            Number of engine parameters loaded.
        """
        import torch

        dtype = getattr(torch, self.config.resolved_dtype())
        items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
        if not self.state.weights_on_gpu:
            torch.cuda.empty_cache()
            self.llm.wake_up(tags=["weights"])
            self.state = self.state.wake(["weights"])

        def cast(pairs: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
            for name, tensor in pairs:
                yield name, tensor.detach().to(dtype)

        loaded = self.llm.apply_model(lambda model: set(model.load_weights(cast(items))))[0]
        check_all_loaded(loaded, self._parameter_names)
        self.state = self.state.loaded_all_weights()
        if not self.state.kv_on_gpu:
            self.llm.wake_up(tags=["kv_cache"])
            self.state = self.state.wake(["kv_cache"])
        if not self.llm.reset_prefix_cache():
            raise InferenceError("vLLM refused to reset the prefix cache (requests still running) after a weight sync")
        self.weight_version += 1
        return len(loaded)

    def sleep(self, level: int) -> None:
        """Free GPU memory for training: level 1 offloads weights, level 2 discards them (full fine-tuning)."""
        self.state = self.state.sleep(level)
        self.llm.sleep(level=level)

    def wake(self, tags: list[str] | None = None) -> None:
        """Wake ``weights`` and/or ``kv_cache`` (default both); after level 2 call :meth:`update_weights` instead."""
        tags = tags or ["weights", "kv_cache"]
        new_state = self.state.wake(tags)
        import torch

        torch.cuda.empty_cache()
        self.llm.wake_up(tags=list(tags))
        self.state = new_state
