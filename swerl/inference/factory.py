"""Build a generation backend (and its async front) from its config: one builder per generator
model, picked by the config's type (``build_backend``)."""

from __future__ import annotations

import logging
import os
import tempfile
from functools import singledispatch
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from swerl.inference.backends.base import ContinuousBackend, GenerationBackend
from swerl.inference.backends.batcher import AsyncBatcher, RequestStream, make_front
from swerl.inference.config import AutoGenerator, HFGenerator, InferenceConfig, OpenAIGenerator, VLLMGenerator, inference_config

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from swerl.inference.engines.engine_pool import EnginePool
    from swerl.inference.engines.vllm_backend import VLLMBackend

log = logging.getLogger(__name__)


def make_backend(kind: Literal["hf", "vllm", "openai"], model: str | None = None, **opts: object) -> GenerationBackend:
    """Build a backend: ``make_backend("hf", None)`` loads the default SmolLM2 model on CPU.

    Args:
        kind: ``hf``, ``vllm`` or ``openai``.
        model: HF folder or .gguf file (None = default model); for ``openai`` the served model name.
        opts: any other field of that backend's config (``HFGenerator``, ``VLLMGenerator``, ``OpenAIGenerator``).

    Raises:
        pydantic.ValidationError: unknown or contradictory options (a field of another backend is named).
        ConfigError / EnvironmentProblem: model not found, vLLM or the default model missing.
    """
    return build_backend(inference_config(backend=kind, model=model, **opts))


@singledispatch
def build_backend(config: BaseModel) -> GenerationBackend:
    """The backend ``config`` describes, built by the one builder registered for its type
    (``HFGenerator``, ``VLLMGenerator``, ``OpenAIGenerator``); every backend has ``tokenizer`` and
    ``weight_version``.

    Raises:
        ConfigError: an ``AutoGenerator``, which only ``swerl train`` resolves (``trainer/setup/auto.py``).
        ConfigError / EnvironmentProblem: what the builder raises (model not found, vLLM missing, ...).
    """
    raise TypeError(f"no generation backend is built from a {type(config).__name__}")


@build_backend.register
def _auto(config: AutoGenerator) -> GenerationBackend:
    from swerl.errors import ConfigError

    raise ConfigError("inference.backend=auto is resolved by swerl train only: pick hf or vllm")


@build_backend.register
def build_hf(config: HFGenerator) -> GenerationBackend:
    """An ``HFBackend`` loaded from ``model`` (with ``lora_adapter``) on ``device``; sets torch's
    threads when ``num_threads`` is set.

    Raises:
        ConfigError / EnvironmentProblem: model not found, the default model package missing.
    """
    from swerl.inference.backends.hf import HFBackend

    if config.num_threads is not None:
        import torch

        torch.set_num_threads(config.num_threads)
    return HFBackend.from_pretrained(config.model, dtype=config.resolved_dtype(), device=config.device,
                                     seed=config.seed, adapter=config.lora_adapter)


@build_backend.register
def build_openai(config: OpenAIGenerator) -> GenerationBackend:
    """An ``OpenAIBackend`` on ``base_url``, the API key from ``api_key_env``."""
    from swerl.inference.backends.openai_backend import OpenAIBackend

    return OpenAIBackend(config.base_url, model=config.model or "default", tokenizer=_openai_tokenizer(config),
                         api_key=os.environ.get(config.api_key_env), endpoint=config.openai_endpoint,
                         timeout_s=config.request_timeout_s, max_concurrency=config.max_batch_size)


@build_backend.register
def build_vllm_with_adapter(config: VLLMGenerator) -> ContinuousBackend:
    """vLLM engines on ``config.model``, sampling with ``config.lora_adapter`` when it is set (the
    engines are built for its rank and load it as version 0).

    Raises:
        ConfigError: the adapter folder is not a peft adapter (no readable ``adapter_config.json``).
    """
    from swerl.errors import ConfigError
    from swerl.inference.model_files import resolve_model
    from swerl.inference.weight_sync.adapter import adapter_rank

    rank = None
    if config.lora_adapter is not None:
        try:
            rank = adapter_rank(config.lora_adapter)
        except ValueError as err:
            raise ConfigError(f"{err}; fix: pass the folder PeftModel.save_pretrained wrote") from None
    backend = build_vllm(config, str(resolve_model(config.model)), Path(tempfile.gettempdir()) / "swerl-vllm-logs",
                         max_lora_rank=rank)
    if config.lora_adapter is not None:
        adapter = str(Path(config.lora_adapter).resolve())
        backend.load_adapter(f"swerl-lora-{Path(adapter).name}", adapter, 0)
    return backend


def parse_cores(spec: str) -> set[int]:
    """Core ids of an OpenMP binding such as ``"0"``, ``"0-3"`` or ``"0-1,4"``."""
    cores: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return cores


def engine_cores(config: VLLMGenerator, available: list[int]) -> list[str | None]:
    """CPU core set of each vLLM engine: ``config.cpu_cores``, else engine k on ``available[k]``
    (the trainer keeps the rest); None entries (no binding) when there are fewer cores than engines."""
    if config.cpu_cores is not None:
        return list(config.cpu_cores[: config.num_engines])
    if len(available) <= config.num_engines and config.vllm_mode == "inprocess":
        return [None]
    return [str(available[k]) if k < len(available) else None for k in range(config.num_engines)]


def build_vllm(config: VLLMGenerator, model_path: str, log_dir: Path, gpus: list[str] | None = None,
               max_lora_rank: int | None = None) -> VLLMBackend | EnginePool:
    """vLLM engines for one rank: an in-process ``VLLMBackend``, or an ``EnginePool`` over the servers
    named in ``server_urls`` or started here (one per core set on CPU, one per GPU id in ``gpus``,
    default the visible GPUs ``0..num_servers-1``; see ``gpu_placement.server_gpus``); with
    ``max_lora_rank``, built for LoRA adapters up to that rank.

    Raises:
        EnvironmentProblem: vLLM missing, or a server that did not start (its log is named).
    """
    import torch

    if config.vllm_mode == "inprocess":
        from swerl.inference.engines.vllm_backend import VLLMBackend

        return VLLMBackend(config, model_path, max_lora_rank=max_lora_rank)
    from transformers import AutoTokenizer

    from swerl.inference.engines.engine_pool import EnginePool
    from swerl.inference.engines.server_process import start_servers
    from swerl.inference.engines.vllm_server import VLLMServerBackend

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    servers: list[Any] = []
    urls = list(config.server_urls)
    if not urls:
        on_cpu = not torch.cuda.is_available()
        count = config.num_servers
        cores = engine_cores(config, sorted(os.sched_getaffinity(0))) if on_cpu else [None] * count
        gpu_ids: list[str | None] = [None] * count if on_cpu else list(gpus or [str(k) for k in range(count)])[:count]
        servers = start_servers(config, model_path, log_dir, cores, gpu_ids, max_lora_rank)
        urls = [server.url for server in servers]
    engines = [VLLMServerBackend(url, tokenizer, max_concurrency=config.max_num_seqs, timeout_s=config.request_timeout_s)
               for url in urls]
    for engine in engines:
        engine.init_worker()
    return EnginePool(engines, tokenizer, on_close=lambda: [server.stop() for server in servers])


def make_batcher(backend: GenerationBackend, config: InferenceConfig) -> AsyncBatcher | RequestStream:
    """The async front of ``backend`` (``batcher.make_front``): continuous for vLLM, else batches of the
    config's size and wait."""
    if isinstance(config, VLLMGenerator):  # continuous batching: each request goes to the engines as it comes
        return RequestStream(backend)
    return make_front(backend, config.max_batch_size, config.batch_wait_s)


def _openai_tokenizer(config: OpenAIGenerator) -> PreTrainedTokenizerBase | None:
    """Tokenizer of the served model: ``tokenizer`` if set, else ``model`` when it is a local path, else None."""
    from transformers import AutoTokenizer

    from swerl.inference.model_files import resolve_model

    spec = config.tokenizer
    if spec is None and config.model is not None and Path(config.model).expanduser().exists():
        spec = config.model
    if spec is None:
        log.warning("openai backend without a local tokenizer: token ids must come from the server")
        return None
    return AutoTokenizer.from_pretrained(resolve_model(spec))
