"""Build a generation backend (and its async batcher) from an :class:`InferenceConfig`."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

from swerl.inference.base import GenerationBackend
from swerl.inference.batcher import AsyncBatcher
from swerl.inference.config import InferenceConfig

log = logging.getLogger(__name__)


def make_backend(kind: Literal["hf", "vllm", "openai"], model: str | None = None, **opts: Any) -> GenerationBackend:
    """Build a backend: ``make_backend("hf", None)`` loads the default SmolLM2 model on CPU.

    Args:
        kind: ``hf``, ``vllm`` or ``openai``.
        model: HF folder or .gguf file (None = default model); for ``openai`` the served model name.
        opts: any other :class:`InferenceConfig` field (dtype, device, base_url, ...).

    Raises:
        pydantic.ValidationError: unknown or contradictory options.
        ConfigError / EnvironmentProblem: model not found, vLLM or the default model missing.
    """
    return build_backend(InferenceConfig(backend=kind, model=model, **opts))


def build_backend(config: InferenceConfig) -> GenerationBackend:
    """The backend ``config`` describes; every backend has ``tokenizer`` and ``weight_version``."""
    if config.backend == "hf":
        from swerl.inference.hf import HFBackend

        if config.num_threads is not None:
            import torch

            torch.set_num_threads(config.num_threads)
        dtype = config.resolved_dtype()
        return HFBackend.from_pretrained(config.model, dtype=dtype, device=config.device, seed=config.seed)
    if config.backend == "vllm":
        from swerl.inference.models import resolve_model
        from swerl.inference.vllm_backend import VLLMBackend

        return VLLMBackend(config, str(resolve_model(config.model)))
    from swerl.inference.openai_backend import OpenAIBackend

    assert config.base_url is not None  # checked by InferenceConfig
    return OpenAIBackend(
        config.base_url,
        model=config.model or "default",
        tokenizer=_openai_tokenizer(config),
        api_key=os.environ.get(config.api_key_env),
        endpoint=config.openai_endpoint,
        timeout_s=config.request_timeout_s,
        max_concurrency=config.max_batch_size,
    )


def make_batcher(backend: GenerationBackend, config: InferenceConfig) -> AsyncBatcher:
    """The async batcher in front of ``backend`` with the config's batch size and wait."""
    return AsyncBatcher(backend, max_batch_size=config.max_batch_size, max_wait_s=config.batch_wait_s)


def _openai_tokenizer(config: InferenceConfig) -> Any:
    """Tokenizer of the served model: ``tokenizer`` if set, else ``model`` when it is a local path, else None."""
    from transformers import AutoTokenizer

    from swerl.inference.models import resolve_model

    spec = config.tokenizer
    if spec is None and config.model is not None and Path(config.model).expanduser().exists():
        spec = config.model
    if spec is None:
        log.warning("openai backend without a local tokenizer: token ids must come from the server")
        return None
    return AutoTokenizer.from_pretrained(resolve_model(spec))
