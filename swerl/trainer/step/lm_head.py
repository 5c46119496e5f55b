"""The trainer forward with a sequence-chunked LM head (``model.lm_head_chunk_tokens``): the model's
own forward runs with its LM head swapped for :class:`ChunkedHeadCall`, which turns the final hidden
states into log-probs ``chunk_tokens`` positions at a time (``rl.lm_head.chunked_head_logprobs``), so
no (n, L-s0, V) logits tensor nor its gradient is ever alive.

The swap keeps every hook of the model in place: under FSDP2 the root's parameters (embeddings,
final norm, LM head) are all-gathered by the root's forward hooks, and the head weight is read
inside that forward, where it is the unsharded tensor; its gradient reaches FSDP's reduce-scatter
as the plain head's would. A LoRA model's head is its base's (``hf_module``). A model whose forward
changes the head's output (soft-capping, a logit scale) is refused: its ``.logits`` would not be
the swapped head's output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import torch

from swerl.errors import ConfigError
from swerl.rl.lm_head import chunked_head_logprobs, resolve_chunk_tokens
from swerl.trainer.policy.lora import hf_module
from swerl.trainer.step.batch import MicroBatch


def configured_chunk_tokens(setting: Literal["auto"] | int) -> int | None:
    """``model.lm_head_chunk_tokens`` as the update takes it: None for ``auto``, else the number."""
    return None if setting == "auto" else setting


def forward_chunk_tokens(model: torch.nn.Module, setting: int | None, rows: int, positions: int) -> int:
    """:func:`resolve_chunk_tokens` for ``model``: auto (None) keeps the model's own head (0) where that
    head cannot be chunked (:func:`output_head` refuses it, or its config soft-caps or scales the
    logits); an explicit k > 0 is kept (and refused by :func:`chunked_forward` on such a model)."""
    if setting is not None:
        return setting
    try:
        head = output_head(model)
    except ConfigError:
        return 0
    if _rescales_logits(model):
        return 0
    return resolve_chunk_tokens(None, rows, positions, head.out_features)


def _rescales_logits(model: torch.nn.Module) -> bool:
    """True for an HF model whose forward changes the head's output (Gemma-2's soft-capping, Cohere's scale)."""
    config = getattr(hf_module(model), "config", None)
    return any(getattr(config, key, None) not in (None, 1.0) for key in ("final_logit_softcapping", "logit_scale"))


def require_chunkable_head(model: torch.nn.Module, setting: int | None) -> None:
    """Refuse, before the first step, an explicit ``model.lm_head_chunk_tokens`` > 0 on a model whose
    head cannot be chunked (:func:`output_head`); auto and 0 always pass."""
    if setting:
        output_head(model)


def output_head(model: torch.nn.Module) -> torch.nn.Linear:
    """The LM head of ``model`` (a LoRA model: its base's), a plain ``nn.Linear``.

    Raises: ConfigError when the head is something else (e.g. LoRA on the head, a non-HF model):
        set ``model.lm_head_chunk_tokens: 0``.
    """
    get = getattr(hf_module(model), "get_output_embeddings", None)
    head = get() if get is not None else None
    if type(head) is not torch.nn.Linear:
        raise ConfigError(f"model.lm_head_chunk_tokens needs a plain nn.Linear LM head, this model has "
                        f"{type(head).__name__}: set model.lm_head_chunk_tokens: 0")
    return head


class ChunkedHeadCall(torch.nn.Module):
    """Stands in for the LM head during one forward: (n, P, H) hidden -> (n, P-1) float32 log-probs
    (returned, as the model's ``.logits``) and ``result`` = (log-probs, entropies or None, log S_t or None)."""

    def __init__(self, head: torch.nn.Linear, input_ids: torch.Tensor, support: torch.Tensor | None,
                 temperature: float, chunk_tokens: int, with_entropy: bool, replay: bool) -> None:
        super().__init__()
        self._head = (head,)  # a tuple: not registered, the model's parameters do not change
        self._args = (input_ids, support, temperature, chunk_tokens, with_entropy, replay)
        self.result: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None] | None = None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        (head,), (input_ids, support, temperature, chunk_tokens, with_entropy, replay) = self._head, self._args
        device = hidden.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else head.weight.dtype
        self.result = chunked_head_logprobs(hidden, head.weight, head.bias, input_ids, temperature,
                                            chunk_tokens=chunk_tokens, compute_dtype=dtype, with_entropy=with_entropy,
                                            support=support, replay=replay)
        return self.result[0]


@contextlib.contextmanager
def head_swapped(model: torch.nn.Module, call: torch.nn.Module) -> Iterator[None]:
    """Inside: ``model``'s LM head (a LoRA model: its base's) is ``call``; the head is put back on exit."""
    hf = hf_module(model)
    head = hf.get_output_embeddings()
    hf.set_output_embeddings(call)
    try:
        yield
    finally:
        hf.set_output_embeddings(head)


def chunked_forward(model: torch.nn.Module, mb: MicroBatch, start: int, temperature: float, with_entropy: bool,
                    chunk_tokens: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The model's forward from column ``start`` on, through the chunked head (call it under the
    forward's autocast, as the model's own forward).

    Returns: (n, L-1-start) float32 log-probs, entropies or None, log S_t or None (``mb.support`` None).
    Raises: ConfigError for an unsupported head (:func:`output_head`) or a model that post-processes
        its head's output.
    """
    ids = mb.input_ids[:, start:]
    support = None if mb.support is None else mb.support[:, start:]
    call = ChunkedHeadCall(output_head(model), ids, support, temperature, chunk_tokens, with_entropy,
                            mb.replay_support)
    with head_swapped(model, call):
        out = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False,
                    logits_to_keep=mb.input_ids.shape[1] - start)
    if call.result is None or out.logits is not call.result[0]:
        raise ConfigError(f"model.lm_head_chunk_tokens: {type(hf_module(model)).__name__} changes its LM head's output (e.g. soft-capping), so the "
                        "head cannot be chunked: set model.lm_head_chunk_tokens: 0")
    return call.result
