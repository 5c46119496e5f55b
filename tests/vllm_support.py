"""The vLLM settings every real-engine test uses (``tests/conftest.py`` builds the session's
in-process engine with them; a test that starts servers passes overrides)."""

from __future__ import annotations

from swerl.inference.config import VLLMGenerator

# enforce_eager skips torch.compile (starts in ~20-40 s on 2 cores); 1 GiB of KV cache and 8
# sequences are plenty for the default model's short test prompts.
ENGINE_FIELDS = dict(backend="vllm", dtype="bfloat16", enforce_eager=True, max_model_len=1024, max_num_seqs=8,
                     max_num_batched_tokens=1024, kv_cache_space_gib=1)


LORA_RANK = 8
"""The session's engines take LoRA adapters up to this rank (the LoRA tests train rank 8)."""


def engine_config(**overrides) -> VLLMGenerator:
    """The tests' :class:`VLLMGenerator` for a vLLM engine, with ``overrides`` applied."""
    return VLLMGenerator(**{**ENGINE_FIELDS, **overrides})
