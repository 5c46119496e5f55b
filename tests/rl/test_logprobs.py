"""Chunked next-token log-probs equal the plain float32 graph bit for bit: values, entropies and
gradients, for fp32/bf16/fp16 logits, with and without a temperature, for chunks that divide the
length, chunks that do not and a single position per chunk."""

from __future__ import annotations

import pytest
import torch

from swerl.rl.logprobs import chunk_tokens_for, next_token_logprobs, next_token_logprobs_unchunked


def _inputs(dtype: torch.dtype, n: int = 2, length: int = 13, vocab: int = 97, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(n, length, vocab, generator=gen) * 4).to(dtype)
    ids = torch.randint(0, vocab, (n, length), generator=gen)
    return logits, ids


def _run(fn, logits, ids, temperature, with_entropy, **kw):
    x = logits.clone().requires_grad_(True)
    lp, ent = fn(x, ids, temperature, with_entropy=with_entropy, **kw)
    gen = torch.Generator().manual_seed(1)
    loss = (lp * torch.randn(lp.shape, generator=gen)).sum()
    if with_entropy:
        loss = loss + (ent * torch.randn(ent.shape, generator=gen)).sum()
    loss.backward()
    return lp.detach(), (ent.detach() if ent is not None else None), x.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("temperature", "with_entropy"), [(1.0, False), (0.7, True), (0.7, False)])
@pytest.mark.parametrize("chunk_tokens", [1, 5, 100])  # one position, chunks that do not divide 12, one chunk
def test_chunked_equals_plain_graph_bit_for_bit(dtype, temperature, with_entropy, chunk_tokens):
    logits, ids = _inputs(dtype)
    ref = _run(next_token_logprobs_unchunked, logits, ids, temperature, with_entropy)
    got = _run(next_token_logprobs, logits, ids, temperature, with_entropy, chunk_tokens=chunk_tokens)
    assert got[0].dtype == torch.float32 and got[0].shape == (2, 12)
    assert torch.equal(got[0], ref[0])
    if with_entropy:
        assert torch.equal(got[1], ref[1])
    else:
        assert got[1] is None
    assert got[2].dtype == dtype
    assert torch.equal(got[2], ref[2])
    assert torch.count_nonzero(got[2][:, -1]) == 0  # the last position predicts nothing
    assert torch.count_nonzero(got[2][:, :-1]) > 0


def test_logprobs_are_the_log_softmax_at_the_temperature():
    logits, ids = _inputs(torch.float32, n=1, length=6, vocab=11)
    lp, _ = next_token_logprobs(logits, ids, 0.5, chunk_tokens=2)
    expected = torch.log_softmax(logits[0, :-1].double() / 0.5, dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
    torch.testing.assert_close(lp[0].double(), expected, rtol=0, atol=1e-5)


def test_no_grad_forward_matches_and_entropy_without_its_gradient():
    logits, ids = _inputs(torch.bfloat16)
    with torch.no_grad():
        lp, ent = next_token_logprobs(logits, ids, 0.7, with_entropy=True, chunk_tokens=3)
        ref_lp, ref_ent = next_token_logprobs_unchunked(logits, ids, 0.7, with_entropy=True)
    assert torch.equal(lp, ref_lp) and torch.equal(ent, ref_ent)
    # entropy computed but unused by the loss: the gradient is the log-probs' alone
    x, y = logits.clone().requires_grad_(True), logits.clone().requires_grad_(True)
    next_token_logprobs(x, ids, 0.7, with_entropy=True, chunk_tokens=3)[0].sum().backward()
    next_token_logprobs_unchunked(y, ids, 0.7)[0].sum().backward()
    assert torch.equal(x.grad, y.grad)


def test_chunk_size_from_bytes_and_bad_input():
    assert chunk_tokens_for(151_936) == 220  # 128 MiB of float32 per chunk
    assert chunk_tokens_for(10**12) == 1
    logits, ids = _inputs(torch.float32)
    with pytest.raises(ValueError, match="temperature"):
        next_token_logprobs(logits, ids, 0.0)
    with pytest.raises(ValueError, match="expected"):
        next_token_logprobs(logits, ids[:, :-1], 1.0)
