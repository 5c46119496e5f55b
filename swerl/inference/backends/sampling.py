"""Pure sampling math shared by the local backends: the processed log-prob distribution
(temperature, top-k, top-p, in vLLM's sampler order) and where a sampled row ends.

Source of the order and of "processed" log-probs: vLLM ``vllm.v1.sample.sampler``
(``logprobs_mode="processed_logprobs"``); see ``docs/inference.md``.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor


def processed_logprobs(logits: Tensor, temperature: float, top_k: int, top_p: float) -> Tensor:
    """Log-probs of the distribution actually sampled from.

    Args:
        logits: (B, V) raw next-token logits, any float dtype.
        temperature: > 0 divides the logits; 0 = greedy, which returns the
            pre-temperature ``log_softmax(logits)`` (as vLLM does for greedy requests)
            and ignores top-k/top-p.
        top_k: keep the k largest logits per row; 0 (or >= V) = off.
        top_p: keep the smallest set of most likely tokens whose mass reaches top_p
            (always at least one token); 1.0 = off. Applied after top-k, on the
            temperature-scaled, top-k-renormalised distribution.

    Returns:
        (B, V) float32 log-probs; filtered tokens are ``-inf``, the kept ones renormalised.
        With top_k=0 and top_p=1 this is exactly ``log_softmax(logits / T)``.
    """
    scores = logits.float()
    if temperature == 0.0:
        return torch.log_softmax(scores, dim=-1)
    scores = scores / temperature
    vocab = scores.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_scores, dim=-1)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop_sorted = mass_before >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return torch.log_softmax(scores, dim=-1)


def truncates(sampling_temperature: float, top_k: int, top_p: float) -> bool:
    """True when the sampled distribution is a strict subset of the vocabulary (top-k or top-p on,
    temperature > 0): only then is a kept set worth storing (greedy ignores both)."""
    return sampling_temperature > 0 and (top_k > 0 or top_p < 1.0)


def kept_sets(logprobs: Tensor) -> Tensor:
    """The kept set K_t of each row of a processed distribution: its finite entries, most likely
    first (the representation of ``swerl.rl.support``; ties in probability in any order).

    Args: logprobs: (B, V) float32 from :func:`processed_logprobs` (filtered tokens ``-inf``).
    Returns: (B, K) int64 ids, K = the largest kept set in the batch (<= top_k unless logits tie
        with the k-th), rows padded with -1.
    """
    kept = torch.isfinite(logprobs)
    width = max(int(kept.sum(dim=-1).max()), 1)
    values, ids = torch.topk(logprobs, width, dim=-1)
    return torch.where(torch.isfinite(values), ids, -1)


def sample_rows(logprobs: Tensor, generators: list[torch.Generator] | None) -> Tensor:
    """Draw one token per row; argmax when ``generators`` is None (greedy).

    Args:
        logprobs: (B, V) float32 from :func:`processed_logprobs`.
        generators: B torch generators on ``logprobs.device``, one per row, so a row's
            draws never depend on which other rows share its batch.

    Returns:
        (B,) int64 token ids.
    """
    if generators is None:
        return logprobs.argmax(dim=-1)
    probs = logprobs.exp()
    draws = [torch.multinomial(probs[row], 1, generator=gen) for row, gen in enumerate(generators)]
    return torch.cat(draws)


def finish_row(
    token_ids: list[int],
    stop_token_ids: set[int],
    stop_string_len: int | None,
    max_new_tokens: int,
) -> tuple[int, Literal["stop", "length"]]:
    """Where one sampled row ends and why.

    Args:
        token_ids: the row's generated ids (may run past its end with padding).
        stop_token_ids: EOS ids and request stop ids; the first one ends the row and is kept.
        stop_string_len: number of generated tokens at which a stop string first appeared
            in the decoded text, or None.
        max_new_tokens: the budget in tokens.

    Returns:
        (number of tokens to keep, finish reason ``stop`` or ``length``).
    """
    end = None
    for index, token in enumerate(token_ids):
        if token in stop_token_ids:
            end = index + 1
            break
    if stop_string_len is not None and (end is None or stop_string_len < end):
        end = stop_string_len
    if end is not None:
        return end, "stop"
    return min(len(token_ids), max_new_tokens), "length"
