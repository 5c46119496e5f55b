"""Next-token log-probs (entropies, kept-set masses) straight from the final hidden states: the LM
head's matmul and the float32 log-softmax run a chunk of positions at a time, so that no (L, V)
tensor, in any dtype, is alive in the forward or the backward.

Stage: ``rl/``. Pure torch: no ``self``, no I/O, no distributed calls.

Formula (per position t < L-1, head weight W (V, H), bias b, compute dtype c, temperature tau):
    logits_t = c(h_t) @ c(W)^T + c(b)     (in c: the LM head of the model's own forward),
    then the float32 lines of ``rl.logprobs`` (``chunk_math``) on logits_t.
:class:`_ChunkedHead` computes each chunk's (C, V) logits in c, their float32 values a sub-chunk
at a time (``chunk_tokens_for(V)`` positions: the float32 graph stays as small as
``rl.logprobs``'), and keeps only the hidden states and the weight for the backward; its backward
recomputes each chunk's logits, differentiates each sub-chunk's float32 graph with autograd (the
(C, V) logits gradient in c, as the plain graph's) and applies the head's matmul backward by hand:
dh = dlogits @ c(W), dW += dlogits^T @ c(h), one GEMM per chunk in c summed in a float32 (V, H)
buffer (float64 for a float64 weight; the plain graph makes one (V, H) GEMM over all positions),
db += dlogits summed. Values equal the plain graph's up to the GEMM's summation order; gradients
too, dW rounded to c once per chunk instead of once.

Sources: Liger's fused linear cross-entropy and prime-rl's fused LM head chunk the head over
positions too. Liger computes the gradient in the forward, where its loss is known; the losses
here need every log-prob first (sequence and step reductions), hence the recompute in the backward.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from swerl.rl.logprobs import chunk_math, chunk_spans, chunk_tokens_for

__all__ = ["AUTO_CHUNK_FACTOR", "AUTO_ELEMENTS", "chunked_head_logprobs", "resolve_chunk_tokens"]

AUTO_ELEMENTS = 2**29
"""``lm_head_chunk_tokens=None`` (auto) chunks a forward whose logits would hold at least this many
elements (rows x positions x V: 1 GiB in bf16, e.g. 3,500 positions of a 152k vocabulary); smaller
forwards keep the model's own head."""

AUTO_CHUNK_FACTOR = 4
"""auto's head chunk, in float32 sub-chunks (``rl.logprobs.chunk_tokens_for(V)``): 4 x 220 = 880
positions at V = 151,936 (267 MB of bf16 logits). Each chunk of the backward adds its (V, H)
weight gradient to a float32 buffer: a chunk of a few hundred positions keeps that addition
small beside the chunk's three head matmuls (2 C V H multiply-adds each)."""


def resolve_chunk_tokens(setting: int | None, rows: int, positions: int, vocab_size: int) -> int:
    """Positions per LM-head chunk for one forward of ``rows`` x ``positions`` (0 = the model's own head).

    Args: setting: ``model.lm_head_chunk_tokens`` (None = auto: :data:`AUTO_CHUNK_FACTOR` x
        ``rl.logprobs.chunk_tokens_for(V)`` positions once rows x positions x V >= :data:`AUTO_ELEMENTS`,
        else 0; 0 = off; k > 0 = k).
    """
    if setting is not None:
        return setting
    if rows * positions * vocab_size < AUTO_ELEMENTS:
        return 0
    return AUTO_CHUNK_FACTOR * chunk_tokens_for(vocab_size)


def _cast(t: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    return None if t is None else t.detach().to(dtype)


def _sub_spans(size: int, step: int) -> list[tuple[int, int]]:
    """(start, stop) of the float32 sub-chunks of a head chunk of ``size`` positions."""
    return [(a, min(a + step, size)) for a in range(0, size, step)]


def _logits_grad(logits: Tensor, targets: Tensor, support: Tensor | None, grad_lp: Tensor, grad_ent: Tensor | None,
                 settings: tuple) -> Tensor:
    """d loss / d logits of one head chunk, (C, V) in the logits' dtype: each float32 sub-chunk's
    graph (``chunk_math``) rebuilt and differentiated with autograd, one sub-chunk alive at a time."""
    temperature, _, math_tokens, with_entropy, _, replay = settings
    out = torch.empty_like(logits)
    for a, z in _sub_spans(logits.shape[0], math_tokens):
        with torch.enable_grad():
            part = logits[a:z].detach().requires_grad_(True)
            lp, ent, _ = chunk_math(part, targets[a:z], temperature, with_entropy,
                                    None if support is None else support[a:z], replay)
            outputs, grads = [lp], [grad_lp[a:z]]
            if grad_ent is not None:
                outputs.append(ent)
                grads.append(grad_ent[a:z])
            (out[a:z],) = torch.autograd.grad(outputs, [part], grads)
    return out


class _ChunkedHead(torch.autograd.Function):
    """forward: (n, L, H) hidden, (V, H) weight, (V,) bias or None, (n, L) ids[, (n, L-1, K) support]
    -> (n, L-1) log-probs, (n, L-1) entropies (or (0,)), (n, L-1) log S_t (or (0,); no gradient).
    backward: (n, L, H) gradient of the hidden states (zero at the last position: it predicts
    nothing), (V, H) and (V,) gradients of the weight and bias in their dtypes.
    ``settings``: (temperature, chunk_tokens, math_tokens, with_entropy, compute_dtype, replay)."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, input_ids: Tensor, settings: tuple,
                support: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        temperature, chunk_tokens, math_tokens, with_entropy, dtype, replay = settings
        n, length = input_ids.shape[0], input_ids.shape[1] - 1
        targets, w, b = input_ids[:, 1:], _cast(weight, dtype), _cast(bias, dtype)
        logprobs = torch.empty(n, length, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty_like(logprobs) if with_entropy else logprobs.new_empty(0)
        log_mass = torch.empty_like(logprobs) if support is not None else logprobs.new_empty(0)
        with torch.autocast(hidden.device.type, enabled=False):
            for i, a, z in chunk_spans(n, length, chunk_tokens):
                logits = torch.nn.functional.linear(hidden[i, a:z].to(dtype), w, b)  # (C, V) in the compute dtype
                for u, v in _sub_spans(z - a, math_tokens):
                    lp, ent, mass = chunk_math(logits[u:v], targets[i, a + u:a + v], temperature, with_entropy,
                                               None if support is None else support[i, a + u:a + v], replay)
                    logprobs[i, a + u:a + v] = lp
                    if with_entropy:
                        entropy[i, a + u:a + v] = ent
                    if support is not None:
                        log_mass[i, a + u:a + v] = mass
        ctx.save_for_backward(hidden, weight, bias, input_ids, support)
        ctx.settings = settings
        ctx.mark_non_differentiable(log_mass)
        return logprobs, entropy, log_mass

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logprobs: Tensor, grad_entropy: Tensor, _grad_mass: Tensor) -> tuple[Tensor | None, ...]:
        hidden, weight, bias, input_ids, support = ctx.saved_tensors
        settings = ctx.settings
        n, length, dtype = input_ids.shape[0], input_ids.shape[1] - 1, settings[4]
        targets, w, b = input_ids[:, 1:], _cast(weight, dtype), _cast(bias, dtype)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden) if need_h else None
        acc = torch.promote_types(weight.dtype, torch.float32)  # float32, or float64 for a float64 weight
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=acc, device=bias.device) if need_b else None
        use_entropy = settings[3] and grad_entropy is not None and grad_entropy.numel() > 0
        with torch.autocast(hidden.device.type, enabled=False):
            for i, a, z in chunk_spans(n, length, settings[1]):
                h = hidden[i, a:z].detach().to(dtype)
                dlogits = _logits_grad(torch.nn.functional.linear(h, w, b), targets[i, a:z],
                                       None if support is None else support[i, a:z], grad_logprobs[i, a:z],
                                       grad_entropy[i, a:z] if use_entropy else None, settings)
                if need_h:
                    grad_h[i, a:z] = (dlogits @ w).to(hidden.dtype)
                if need_w:
                    grad_w.add_(dlogits.t() @ h)  # one (V, H) GEMM in the compute dtype, summed in float32
                if need_b:
                    grad_b.add_(dlogits.sum(0, dtype=acc))
        return (grad_h, None if grad_w is None else grad_w.to(weight.dtype),
                None if grad_b is None else grad_b.to(bias.dtype), None, None, None)


def chunked_head_logprobs(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, input_ids: Tensor, temperature: float, *,
    chunk_tokens: int, compute_dtype: torch.dtype, with_entropy: bool = False, support: Tensor | None = None,
    replay: bool = False, math_tokens: int | None = None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """log pi(x_{t+1} | x_<=t) (and H_t, log S_t) from the final hidden states, ``chunk_tokens`` positions at a time.

    Args:
        hidden: (n, L, H) final hidden states (after the final norm), any float dtype.
        weight: (V, H) LM head weight (tied or not); bias: (V,) or None.
        input_ids: (n, L) int64; position t's target is ``input_ids[:, t + 1]``.
        temperature: tau > 0; the logits are divided by it in float32.
        chunk_tokens: positions per head chunk (>= 1): the largest tensors over V are its (chunk_tokens,
            V) logits and their gradient, in the compute dtype.
        math_tokens: positions per float32 sub-chunk of a head chunk (``rl.logprobs.chunk_math``);
            None = ``rl.logprobs.chunk_tokens_for(V)`` (128 MiB of float32 logits).
        compute_dtype: dtype of the head's matmul (the autocast dtype, or the weight's dtype).
        with_entropy: also return H_t over the vocabulary (differentiable).
        support: (n, L-1, K) int64 stored kept sets (``rl.support``) or None; ``replay`` as in
            ``rl.logprobs.next_token_logprobs_on_support``.
    Returns: (n, L-1) float32 log-probs, (n, L-1) float32 entropies or None, (n, L-1) float32 log
        S_t (no gradient) or None without ``support``.
    Raises: ValueError for ``temperature <= 0``, ``chunk_tokens < 1`` or mismatched shapes.
    """
    if temperature <= 0 or chunk_tokens < 1:
        raise ValueError(f"temperature > 0 and chunk_tokens >= 1 expected, got {temperature} and {chunk_tokens}")
    if hidden.dim() != 3 or input_ids.shape != hidden.shape[:2] or weight.shape[1] != hidden.shape[2]:
        raise ValueError(f"hidden (n, L, H), input_ids (n, L) and weight (V, H) expected, got {tuple(hidden.shape)}, "
                         f"{tuple(input_ids.shape)} and {tuple(weight.shape)}")
    if support is not None and (support.dim() != 3 or support.shape[:2] != (input_ids.shape[0], input_ids.shape[1] - 1)):
        raise ValueError(f"support (n, L-1, K) expected for input_ids {tuple(input_ids.shape)}, got {tuple(support.shape)}")
    settings = (float(temperature), chunk_tokens, math_tokens or chunk_tokens_for(weight.shape[0]), with_entropy,
                compute_dtype, replay)
    logprobs, entropy, log_mass = _ChunkedHead.apply(hidden, weight, bias, input_ids, settings, support)
    return logprobs, (entropy if with_entropy else None), (log_mass if support is not None else None)
