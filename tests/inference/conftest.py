"""Fixtures of the inference tests: a tiny random-weight Llama and a character-level tokenizer
with a ChatML template, both built offline from a config in well under a second."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>"]
CHARS = list("abcdefghijklmnopqrstuvwxyz .,:!?\n0123456789")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level WordLevel tokenizer: ids 0-3 are specials, then one id per character."""
    vocab = {token: index for index, token in enumerate(SPECIALS + CHARS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<|im_end|>", bos_token="<|im_start|>", unk_token="<unk>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    """2-layer Llama with hidden size 32 and random weights, fp32, eval mode."""
    from tiny_llama import build_tiny_llama

    return build_tiny_llama(vocab_size, seed, max_position_embeddings=256, initializer_range=0.2, pad_token_id=0,
                            bos_token_id=1, eos_token_id=2, tie_word_embeddings=False).eval()


@pytest.fixture
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    return build_tiny_tokenizer()


@pytest.fixture
def tiny_model(tiny_tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    return build_tiny_model(len(tiny_tokenizer))


@pytest.fixture
def make_tiny_model(tiny_tokenizer: PreTrainedTokenizerFast):
    """Factory: ``make_tiny_model(seed)`` -> another tiny Llama with the same vocab."""
    return lambda seed=0: build_tiny_model(len(tiny_tokenizer), seed)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models run fastest on one thread; two OpenMP threads on a busy 2-core box crawl. The
    restore calls ``torch._C.set_num_threads``: once a test has started vLLM's CPU worker in this
    process, ``torch.set_num_threads`` is a no-op (vLLM replaces it), and the suite would go on at 1."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch._C.set_num_threads(before)
