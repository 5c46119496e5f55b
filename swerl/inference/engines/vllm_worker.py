"""Code that runs INSIDE a vLLM worker: a worker extension (``worker_extension_cls``) that swerl's
engines and servers are started with, reachable in-process by ``LLM.collective_rpc`` and over HTTP
by ``POST /collective_rpc`` (``VLLM_SERVER_DEV_MODE=1``).

Why it exists: on vLLM's CPU build, ``reload_weights`` re-processes every layer whose weights it
loads, but a tied ``lm_head`` (SmolLM2, Qwen3-0.6B tie it to ``embed_tokens``) receives no weights of
its own (vLLM logs "ParallelLMHead: Failed to load weights"), so a packed copy of it keeps the
OLD embedding (measured with a fp32 engine on an AVX2 CPU: the head's output off by 0.56 of 16 and
the probe by 0.06 nats mean / 0.6 max after one sync, 0.0000 with the re-pack; docs/inference.md). :meth:`SwerlWorkerExtension.swerl_reload_weights` reloads and then re-packs every tied
head, and the parity probe checks the result after every sync. It also enables AMX tiles before
bf16 kernels run on CPU.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

EXTENSION_QUALNAME = "swerl.inference.engines.vllm_worker.SwerlWorkerExtension"


def repack_tied_heads(model: torch.nn.Module) -> list[str]:
    """Re-run ``process_weights_after_loading`` of every LM head that shares its weight with an
    embedding (vLLM CPU packs the head once at load; a reload never refreshes a tied one).

    Returns:
        names of the heads re-packed (empty when nothing is tied or on GPU, where heads read
        ``weight`` directly and nothing needs doing).
    """
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return []
    embedding_ids = {
        id(module.weight)
        for module in model.modules()
        if not isinstance(module, ParallelLMHead) and type(module).__name__ == "VocabParallelEmbedding"
    }
    repacked = []
    for name, module in model.named_modules():
        if isinstance(module, ParallelLMHead) and id(module.weight) in embedding_ids:
            module.quant_method.process_weights_after_loading(module)
            repacked.append(name)
    return repacked


RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
"""The vLLM logger that warns "ParallelLMHead: Failed to load weights" when a reload brings no
weights for a tied head (it has none of its own: it shares the embedding's)."""


class _TiedHeadNote(logging.Filter):
    """Rewrites vLLM's "<Head>: Failed to load weights" of a reload into a DEBUG note that says what
    it means: a tied LM head gets no weights of its own, and swerl re-packs it from the reloaded
    embedding (:func:`repack_tied_heads`; the parity probe checks the result). Other records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "%s: Failed to load weights" and record.args and "LMHead" in str(record.args[0]):
            record.msg = "%s: no weights of its own in the reload (tied to the embedding): swerl re-packs it"
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def quiet_tied_head_warning() -> None:
    """Install :class:`_TiedHeadNote` on vLLM's reload logger (once): a weight sync that succeeds
    prints no warning that reads like a failure."""
    target = logging.getLogger(RELOAD_LOGGER)
    if not any(isinstance(f, _TiedHeadNote) for f in target.filters):
        target.addFilter(_TiedHeadNote())


class SwerlWorkerExtension:
    """Methods mixed into vLLM's worker class (``self`` is the worker)."""

    def swerl_init_amx(self) -> bool:
        """Request AMX tile state for this process (bf16 kernels on CPUs with ``amx_bf16`` die with
        SIGILL without it); True when AMX is usable. A no-op elsewhere."""
        import torch

        init = getattr(torch._C._cpu, "_init_amx", None)
        return bool(init()) if init is not None else False

    def swerl_reload_weights(self, weights_path: str, repack_tied: bool = True) -> dict[str, Any]:
        """Reload a safetensors folder in place (``reload_weights``), then re-pack tied LM heads.

        Args:
            weights_path: folder of ``*.safetensors`` with HF parameter names.
            repack_tied: False leaves a tied head stale (only to prove the parity probe catches it).

        Returns:
            ``{"repacked": [head names]}`` (JSON-serialisable: the HTTP route returns it as is).
        """
        repack = repack_tied in (True, "true", "True", "1")
        if repack:
            quiet_tied_head_warning()
        self.reload_weights(weights_path=weights_path)
        repacked = repack_tied_heads(self.get_model()) if repack else []
        self._swerl_reloads = self.swerl_reload_count() + 1
        return {"repacked": repacked}

    def swerl_reload_count(self) -> int:
        """Weight reloads this worker has done since it started (one per owner per step; a diagnostic)."""
        return int(getattr(self, "_swerl_reloads", 0))
