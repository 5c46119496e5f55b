"""Log-probs (and entropies) of the next tokens from a causal LM's logits, in float32, in chunks of
tokens, so that no float32 (T, V) tensor is ever alive.

Stage: ``rl/``. Pure torch: no ``self``, no I/O, no distributed calls.

Formula (per position t < L-1, sampling temperature tau):
    z_t = float32(logits_t) / tau,  logp_t = z_t[x_{t+1}] - logsumexp(z_t),
    H_t = logsumexp(z_t) - sum softmax(z_t) * z_t   (``entropy_from_logits``).
A plain autograd graph of these lines keeps float32 copies of the whole (L, V) logits alive for
its backward (the cast, the division by tau, logsumexp's input, then one (L, V) gradient per
branch): about 6x the bf16 logits at its peak. :class:`_NextTokenLogprobs` runs the same lines on
``chunk_tokens`` positions at a time and saves only the logits the model made; its backward
recomputes each chunk's float32 graph and differentiates it with autograd, so values AND
gradients are those of the plain graph bit for bit (the ops are row-wise: a chunk's rows see the
same kernels), while the float32 part of the peak is one chunk. The (L, V) logits in the model's
dtype and their (L, V) gradient remain (the LM head's matmul makes and consumes them).

Sources: the per-chunk recompute is what verl's ``logprobs_from_logits`` (row loop), Liger's and
verl's fused linear cross-entropy and prime-rl's chunked loss do to avoid (L, V) float32 tensors.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from swerl.rl.policy_loss import entropy_from_logits
from swerl.rl.support import has_support, kept_logsumexp

__all__ = ["CHUNK_BYTES", "chunk_math", "chunk_spans", "chunk_tokens_for", "next_token_logprobs", "next_token_logprobs_on_support",
           "next_token_logprobs_unchunked"]

CHUNK_BYTES = 128 * 2**20
"""float32 bytes of one chunk's (tokens, V) logits: 220 tokens of Qwen3's 151,936-entry vocabulary
(a chunk's graph holds ~5 such tensors at its peak: ~0.7 GB, whatever L)."""


def chunk_tokens_for(vocab_size: int, chunk_bytes: int | None = None) -> int:
    """Positions per chunk so that one float32 (positions, V) tensor takes at most ``chunk_bytes``
    (None = :data:`CHUNK_BYTES`; at least 1 position)."""
    return max(1, (chunk_bytes or CHUNK_BYTES) // (4 * vocab_size))


def chunk_math(logits: Tensor, targets: Tensor, temperature: float, with_entropy: bool,
                support: Tensor | None = None, replay: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """The float32 lines of the module docstring on one chunk: (C, V) logits, (C,) targets ->
    (C,) log-probs, (C,) entropies (empty when not asked) and (C,) log S_t (empty without
    ``support``). With a (C, K) ``support`` (``rl.support``), ``replay`` normalises over each
    position's kept set instead of the vocabulary; log S_t is detached."""
    z = logits.float() / temperature
    picked = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    full = torch.logsumexp(z, dim=-1)
    entropy = entropy_from_logits(z) if with_entropy else z.new_empty(0)
    if support is None:
        return picked - full, entropy, z.new_empty(0)
    stored = has_support(support)
    kept = kept_logsumexp(z, support)
    log_mass = torch.where(stored, kept - full, 0.0).detach()
    norm = torch.where(stored, kept, full) if replay else full
    return picked - norm, entropy, log_mass


def chunk_spans(n: int, length: int, size: int) -> list[tuple[int, int, int]]:
    """(row, start, stop) over positions 0..length-1 of each of n rows, ``size`` positions at most."""
    return [(i, a, min(a + size, length)) for i in range(n) for a in range(0, length, size)]


class _NextTokenLogprobs(torch.autograd.Function):
    """forward: (n, L, V) logits, (n, L) ids[, (n, L-1, K) support] -> (n, L-1) log-probs,
    (n, L-1) entropies (or (0,)), (n, L-1) log S_t (or (0,); no gradient).
    backward: per chunk, the float32 graph rebuilt and differentiated; (n, L, V) gradient in the
    logits' dtype, zero at the last position (it predicts nothing)."""

    @staticmethod
    def forward(ctx, logits: Tensor, input_ids: Tensor, temperature: float, chunk_tokens: int,
                with_entropy: bool, support: Tensor | None = None, replay: bool = False,
                ) -> tuple[Tensor, Tensor, Tensor]:
        n, length = input_ids.shape[0], input_ids.shape[1] - 1
        targets = input_ids[:, 1:]
        logprobs = torch.empty(n, length, dtype=torch.float32, device=logits.device)
        entropy = torch.empty(n, length, dtype=torch.float32, device=logits.device) if with_entropy else None
        log_mass = torch.empty(n, length, dtype=torch.float32, device=logits.device) if support is not None else None
        for i, a, b in chunk_spans(n, length, chunk_tokens):
            chunk_support = None if support is None else support[i, a:b]
            lp, ent, mass = chunk_math(logits[i, a:b], targets[i, a:b], temperature, with_entropy, chunk_support,
                                        replay)
            logprobs[i, a:b] = lp
            if entropy is not None:
                entropy[i, a:b] = ent
            if log_mass is not None:
                log_mass[i, a:b] = mass
        ctx.save_for_backward(logits, input_ids, support)
        ctx.settings = (temperature, chunk_tokens, with_entropy, replay)
        empty = logprobs.new_empty(0)
        mass_out = log_mass if log_mass is not None else empty
        ctx.mark_non_differentiable(mass_out)
        return logprobs, (entropy if entropy is not None else empty), mass_out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logprobs: Tensor, grad_entropy: Tensor, _grad_mass: Tensor) -> tuple[Tensor | None, ...]:
        logits, input_ids, support = ctx.saved_tensors
        temperature, chunk_tokens, with_entropy, replay = ctx.settings
        n, length = input_ids.shape[0], input_ids.shape[1] - 1
        targets = input_ids[:, 1:]
        grad = torch.zeros_like(logits)
        for i, a, b in chunk_spans(n, length, chunk_tokens):
            with torch.enable_grad():
                chunk = logits[i, a:b].detach().requires_grad_(True)
                chunk_support = None if support is None else support[i, a:b]
                lp, ent, _ = chunk_math(chunk, targets[i, a:b], temperature, with_entropy, chunk_support, replay)
                outputs, grads = [lp], [grad_logprobs[i, a:b]]
                if with_entropy and grad_entropy is not None and grad_entropy.numel():
                    outputs.append(ent)
                    grads.append(grad_entropy[i, a:b])
                torch.autograd.backward(outputs, grads)
            grad[i, a:b] = chunk.grad
        return grad, None, None, None, None, None, None


def next_token_logprobs(
    logits: Tensor, input_ids: Tensor, temperature: float = 1.0, *, with_entropy: bool = False,
    chunk_tokens: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """log pi(x_{t+1} | x_<=t) at temperature ``temperature`` (and the entropy H_t), in chunks.

    Args:
        logits: (n, L, V) float (bf16, fp16 or fp32: the model's output, not upcast).
        input_ids: (n, L) int64; position t's target is ``input_ids[:, t + 1]``.
        temperature: tau > 0; logits are divided by it in float32.
        with_entropy: also return H_t (differentiable).
        chunk_tokens: positions per chunk; None = :func:`chunk_tokens_for` (``CHUNK_BYTES``).
    Returns: (n, L-1) float32 log-probs, and (n, L-1) float32 entropies or None. Values and
        gradients equal :func:`next_token_logprobs_unchunked` bit for bit.
    Raises: ValueError for ``temperature <= 0`` or mismatched shapes.
    """
    _check_inputs(logits, input_ids, temperature)
    size = chunk_tokens or chunk_tokens_for(logits.shape[-1])
    logprobs, entropy, _ = _NextTokenLogprobs.apply(logits, input_ids, float(temperature), size, with_entropy)
    return logprobs, (entropy if with_entropy else None)


def next_token_logprobs_on_support(
    logits: Tensor, input_ids: Tensor, support: Tensor, temperature: float = 1.0, *, replay: bool,
    with_entropy: bool = False, chunk_tokens: int | None = None,
) -> tuple[Tensor, Tensor | None, Tensor]:
    """:func:`next_token_logprobs` for tokens a truncated sampler drew from stored kept sets.

    Args:
        logits, input_ids, temperature, with_entropy, chunk_tokens: as :func:`next_token_logprobs`.
        support: (n, L-1, K) int64 kept set of each position's target (``rl.support``; a row of
            ``NO_TOKEN`` = none stored: that position is normalised over the vocabulary).
        replay: normalise each position with a stored support over its kept set (log pi(y) =
            z_y - logsumexp_{K_t} z); False = over the vocabulary (the values of
            :func:`next_token_logprobs` bit for bit).
    Returns: (n, L-1) float32 log-probs, (n, L-1) entropies (over the vocabulary) or None, and
        (n, L-1) float32 log S_t = logsumexp_{K_t} z - logsumexp_V z (<= 0; 0 where none is stored;
        no gradient).
    Raises: ValueError for ``temperature <= 0`` or mismatched shapes.
    """
    _check_inputs(logits, input_ids, temperature)
    if support.dim() != 3 or support.shape[:2] != (input_ids.shape[0], input_ids.shape[1] - 1):
        raise ValueError(f"support (n, L-1, K) expected for input_ids {tuple(input_ids.shape)}, got "
                         f"{tuple(support.shape)}")
    size = chunk_tokens or chunk_tokens_for(logits.shape[-1])
    logprobs, entropy, log_mass = _NextTokenLogprobs.apply(logits, input_ids, float(temperature), size, with_entropy,
                                                           support, replay)
    return logprobs, (entropy if with_entropy else None), log_mass


def _check_inputs(logits: Tensor, input_ids: Tensor, temperature: float) -> None:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if logits.dim() != 3 or input_ids.shape != logits.shape[:2]:
        raise ValueError(f"logits (n, L, V) and input_ids (n, L) expected, got {tuple(logits.shape)} and "
                         f"{tuple(input_ids.shape)}")


def next_token_logprobs_unchunked(
    logits: Tensor, input_ids: Tensor, temperature: float = 1.0, *, with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """The plain autograd graph of the module docstring over all positions at once: the
    reference :func:`next_token_logprobs` is tested and benchmarked against (its float32 (L, V)
    tensors are what chunking removes). Same shapes and dtypes."""
    z = logits[:, :-1].float() / temperature
    picked = z.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    logprobs = picked - torch.logsumexp(z, dim=-1)
    return logprobs, (entropy_from_logits(z) if with_entropy else None)
