"""Next-token log-probs (entropies, kept-set masses) straight from the final hidden states: the LM
head's matmul and the float32 log-softmax run a chunk of positions at a time, so that no (L, V)
tensor, in any dtype, is alive in the forward or the backward.

Stage: ``rl/``. Pure torch: no ``self``, no I/O, no distributed calls.

Formula (per position t < L-1, head weight W (V, H), bias b, compute dtype c, temperature tau):
    logits_t = c(h_t) @ c(W)^T + c(b)     (in c: the LM head of the model's own forward),
    then the float32 lines of ``rl.logprobs`` (``chunk_math``) on logits_t.
:class:`_ChunkedHead` computes each chunk's logits, its float32 values, and keeps only the hidden
states and the weight for the backward; its backward recomputes each chunk's logits, differentiates
the float32 graph with autograd (the (C, V) logits gradient in c, as the plain graph's) and applies
the head's matmul backward by hand: dh = dlogits @ c(W), dW += dlogits^T @ c(h) summed over the
chunks in float32 (float64 for a float64 weight; the plain graph makes one (V, H) GEMM in c instead), db += dlogits summed.
Values equal the plain graph's up to the GEMM's summation order; gradients too, with dW rounded to
c once instead of once per chunk-sum.

Sources: Liger's fused linear cross-entropy and prime-rl's fused LM head chunk the head the same way.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from swerl.rl.logprobs import chunk_math, chunk_spans, chunk_tokens_for

__all__ = ["AUTO_ELEMENTS", "chunked_head_logprobs", "resolve_chunk_tokens"]

AUTO_ELEMENTS = 2**29
"""``lm_head_chunk_tokens=None`` (auto) chunks a forward whose logits would hold at least this many
elements (rows x positions x V: 1 GiB in bf16, e.g. 3,500 positions of a 152k vocabulary); smaller
forwards keep the model's own head."""


def resolve_chunk_tokens(setting: int | None, rows: int, positions: int, vocab_size: int) -> int:
    """Positions per LM-head chunk for one forward of ``rows`` x ``positions`` (0 = the model's own head).

    Args: setting: ``model.lm_head_chunk_tokens`` (None = auto: ``rl.logprobs.chunk_tokens_for(V)``
        positions once rows x positions x V >= :data:`AUTO_ELEMENTS`, else 0; 0 = off; k > 0 = k).
    """
    if setting is not None:
        return setting
    return chunk_tokens_for(vocab_size) if rows * positions * vocab_size >= AUTO_ELEMENTS else 0


def _cast(t: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    return None if t is None else t.detach().to(dtype)


class _ChunkedHead(torch.autograd.Function):
    """forward: (n, L, H) hidden, (V, H) weight, (V,) bias or None, (n, L) ids[, (n, L-1, K) support]
    -> (n, L-1) log-probs, (n, L-1) entropies (or (0,)), (n, L-1) log S_t (or (0,); no gradient).
    backward: (n, L, H) gradient of the hidden states (zero at the last position: it predicts
    nothing), (V, H) and (V,) gradients of the weight and bias in their dtypes."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, input_ids: Tensor, temperature: float,
                chunk_tokens: int, with_entropy: bool, compute_dtype: torch.dtype, support: Tensor | None = None,
                replay: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        n, length = input_ids.shape[0], input_ids.shape[1] - 1
        targets, w, b = input_ids[:, 1:], _cast(weight, compute_dtype), _cast(bias, compute_dtype)
        logprobs = torch.empty(n, length, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty_like(logprobs) if with_entropy else logprobs.new_empty(0)
        log_mass = torch.empty_like(logprobs) if support is not None else logprobs.new_empty(0)
        with torch.autocast(hidden.device.type, enabled=False):
            for i, a, z in chunk_spans(n, length, chunk_tokens):
                logits = torch.nn.functional.linear(hidden[i, a:z].to(compute_dtype), w, b)
                lp, ent, mass = chunk_math(logits, targets[i, a:z], temperature, with_entropy,
                                           None if support is None else support[i, a:z], replay)
                logprobs[i, a:z] = lp
                if with_entropy:
                    entropy[i, a:z] = ent
                if support is not None:
                    log_mass[i, a:z] = mass
        ctx.save_for_backward(hidden, weight, bias, input_ids, support)
        ctx.settings = (temperature, chunk_tokens, with_entropy, compute_dtype, replay)
        ctx.mark_non_differentiable(log_mass)
        return logprobs, entropy, log_mass

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logprobs: Tensor, grad_entropy: Tensor, _grad_mass: Tensor) -> tuple[Tensor | None, ...]:
        hidden, weight, bias, input_ids, support = ctx.saved_tensors
        temperature, chunk_tokens, with_entropy, dtype, replay = ctx.settings
        n, length = input_ids.shape[0], input_ids.shape[1] - 1
        targets, w, b = input_ids[:, 1:], _cast(weight, dtype), _cast(bias, dtype)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden) if need_h else None
        acc = torch.promote_types(weight.dtype, torch.float32)  # float32, or float64 for a float64 weight
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=acc, device=bias.device) if need_b else None
        use_entropy = with_entropy and grad_entropy is not None and grad_entropy.numel() > 0
        for i, a, z in chunk_spans(n, length, chunk_tokens):
            h = hidden[i, a:z].detach().to(dtype)
            with torch.enable_grad(), torch.autocast(hidden.device.type, enabled=False):
                logits = torch.nn.functional.linear(h, w, b).requires_grad_(True)
                lp, ent, _ = chunk_math(logits, targets[i, a:z], temperature, with_entropy,
                                        None if support is None else support[i, a:z], replay)
                outputs, grads = [lp], [grad_logprobs[i, a:z]]
                if use_entropy:
                    outputs.append(ent)
                    grads.append(grad_entropy[i, a:z])
                (dlogits,) = torch.autograd.grad(outputs, [logits], grads)  # (C, V) in the compute dtype
            if need_h:
                grad_h[i, a:z] = (dlogits @ w).to(hidden.dtype)
            if need_w:
                grad_w += (dlogits.t() @ h).to(acc)
            if need_b:
                grad_b += dlogits.to(acc).sum(0)
        return (grad_h, None if grad_w is None else grad_w.to(weight.dtype),
                None if grad_b is None else grad_b.to(bias.dtype), None, None, None, None, None, None, None)


def chunked_head_logprobs(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, input_ids: Tensor, temperature: float, *,
    chunk_tokens: int, compute_dtype: torch.dtype, with_entropy: bool = False, support: Tensor | None = None,
    replay: bool = False,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """log pi(x_{t+1} | x_<=t) (and H_t, log S_t) from the final hidden states, ``chunk_tokens`` positions at a time.

    Args:
        hidden: (n, L, H) final hidden states (after the final norm), any float dtype.
        weight: (V, H) LM head weight (tied or not); bias: (V,) or None.
        input_ids: (n, L) int64; position t's target is ``input_ids[:, t + 1]``.
        temperature: tau > 0; the logits are divided by it in float32.
        chunk_tokens: positions per chunk (>= 1); the largest tensor over V is (chunk_tokens, V).
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
    logprobs, entropy, log_mass = _ChunkedHead.apply(hidden, weight, bias, input_ids, float(temperature), chunk_tokens,
                                                     with_entropy, compute_dtype, support, replay)
    return logprobs, (entropy if with_entropy else None), (log_mass if support is not None else None)
