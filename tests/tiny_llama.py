"""The one tiny model of the suite: a 2-layer Llama (hidden size 32) built from a config, no hub,
random weights drawn from ``seed``. A plain module (not a conftest) so that the torchrun workers
of the distributed tests import the same builder as pytest does."""

from __future__ import annotations

from typing import Any

TINY_LLAMA = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2}


def build_tiny_llama(vocab_size: int, seed: int = 0, **config: Any):  # noqa: ANN201 - LlamaForCausalLM
    """A fp32 ``LlamaForCausalLM`` of ``TINY_LLAMA`` size over ``vocab_size`` ids; ``config`` overrides
    or adds ``LlamaConfig`` fields (max_position_embeddings, tie_word_embeddings, token ids, ...)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, **{**TINY_LLAMA, **config})).float()
