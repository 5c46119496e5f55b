"""Shared pytest fixtures: the one tiny model of the suite.

``build_tiny_llama`` is the only place a test model is built (a 2-layer Llama, hidden size 32,
built from a config: no hub, random weights drawn from ``seed``); the stage folders' helpers
(``trainer/_support.py``, ``rl/_tiny.py``, ``inference/conftest.py``, ``agent/conftest.py``) call
it with their vocabulary and special tokens.
"""

from __future__ import annotations

from typing import Any

import pytest

TINY_LLAMA = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2}


def build_tiny_llama(vocab_size: int, seed: int = 0, **config: Any):  # noqa: ANN201 - LlamaForCausalLM
    """A fp32 ``LlamaForCausalLM`` of ``TINY_LLAMA`` size over ``vocab_size`` ids; ``config`` overrides
    or adds ``LlamaConfig`` fields (max_position_embeddings, tie_word_embeddings, token ids, ...)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, **{**TINY_LLAMA, **config})).float()


@pytest.fixture
def tiny_llama():  # noqa: ANN201
    """The builder as a fixture: ``tiny_llama(vocab_size, seed=0, **config)``."""
    return build_tiny_llama
