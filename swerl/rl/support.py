"""The sampler's support: which tokens a top-k / top-p sampler drew each token from, stored
compactly, and the normalisation over that set that the trainer replays.

Stage: ``rl/``. Pure torch.

Representation (one sampled token; the samplers build it with
``inference.backends.sampling.kept_sets``): the ids of the kept set K_t in the sampler's order of
decreasing probability, the sampled id among them. Top-k keeps the k largest logits (a tie with
the k-th logit is kept too, as vLLM and the HF backend do); top-p then keeps the shortest prefix of
that order whose mass reaches top_p, so K_t is a prefix of the sorted top-k and |K_t| <= top_k
(plus exact ties at the k-th logit). Top-p alone stores the nucleus (bounded by the vocabulary
only). Untruncated sampling (top_k = 0 and top_p = 1, or greedy) stores nothing: K_t is the
vocabulary. As tensors a batch's supports are (..., K) int64, right-padded with
:data:`NO_TOKEN`; a position whose first entry is ``NO_TOKEN`` has no stored support (the whole
vocabulary).

Formulas (docs/algorithms.md, Sampling support; z the logits at the sampling temperature):
    replayed  log pi(y) = z_y - logsumexp_{v in K_t} z_v
    full      log pi(y) = z_y - logsumexp_v z_v
    log S_t = logsumexp_{v in K_t} z_v - logsumexp_v z_v   (the kept mass, <= 0)
so full = replayed + log S_t, and a full-vocabulary TIS ratio pi_old / mu carries the factor S_t.
Source: slime's and SkyRL's (PR 2237) top-k/top-p replay; spec section 7.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["NO_TOKEN", "has_support", "kept_logsumexp", "pad_supports"]

NO_TOKEN = -1
"""Padding of a support row (and the whole row where no support is stored)."""


def has_support(support: Tensor) -> Tensor:
    """(...,) bool: the positions of a (..., K) support tensor that hold a stored support."""
    return support[..., 0] != NO_TOKEN


def kept_logsumexp(z: Tensor, support: Tensor) -> Tensor:
    """logsumexp of ``z`` over each position's kept set.

    Args: z: (C, V) float32 logits at the sampling temperature; support: (C, K) int64, padded with
        ``NO_TOKEN``.
    Returns: (C,) float32, differentiable w.r.t. ``z``; at a position without stored support the
        value is that of its first logit alone (finite, so that no NaN reaches a gradient: callers
        select the full normalisation there with ``has_support``).
    """
    valid = support != NO_TOKEN
    valid[..., 0] = True
    kept = z.gather(-1, support.clamp(min=0)).masked_fill(~valid, float("-inf"))
    return torch.logsumexp(kept, dim=-1)


def pad_supports(rows: list[list[int]], width: int | None = None) -> Tensor:
    """Per-token supports as stored in an episode (a list of ids per token, ``[]`` = none) -> (T, K)
    int64, padded with ``NO_TOKEN``; K = ``width`` or the longest list (at least 1)."""
    size = max(width or 0, max((len(r) for r in rows), default=0), 1)
    out = torch.full((len(rows), size), NO_TOKEN, dtype=torch.int64)
    for t, ids in enumerate(rows):
        if ids:
            out[t, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
    return out
