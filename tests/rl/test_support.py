"""Sampling-support replay: the trainer's log-probs over the sampler's kept set against a float64
reference written from the spec (top-k, top-p, both, ties at the k-th logit, greedy), and nothing
changed bit for bit where no set is stored."""

import pytest
import torch

from swerl.inference.backends.sampling import kept_sets, processed_logprobs, truncates
from swerl.rl.logprobs import next_token_logprobs, next_token_logprobs_on_support
from swerl.rl.support import NO_TOKEN, pad_supports

V, L, T = 50, 12, 0.7


def _reference_kept(logits: torch.Tensor, top_k: int, top_p: float) -> list[set[int]]:
    """float64, per position: the k largest logits (ties with the k-th kept), then the shortest
    prefix of that set, most likely first, whose renormalised mass reaches top_p."""
    out = []
    for z in logits.double() / T:
        order = torch.argsort(z, descending=True).tolist()
        if top_k:
            kth = z[order[top_k - 1]]
            order = [v for v in order if z[v] >= kth]
        probs = torch.softmax(z[order], dim=0)
        kept, mass = [], 0.0
        for v, p in zip(order, probs.tolist()):
            kept.append(v)
            mass += p
            if mass >= top_p:
                break
        out.append(set(kept))
    return out


def _case(seed: int, ties: bool = False):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, L, V, generator=g) * 3
    if ties:  # several logits equal to the 4th largest at every position
        top = torch.sort(logits, dim=-1, descending=True).values
        logits[0, :, :3] = top[0, :, 3:4]
    return logits


def _sampled_targets(kept: list[set[int]], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = [sorted(k)[int(torch.randint(len(k), (1,), generator=g))] for k in kept]
    return torch.tensor([[0] + ids])  # the target of position t is input_ids[t + 1]


@pytest.mark.parametrize(("top_k", "top_p", "ties"), [(5, 1.0, False), (0, 0.8, False), (8, 0.7, False),
                                                      (4, 1.0, True), (4, 0.9, True), (1, 1.0, False)])
def test_replay_matches_float64_renormalisation_over_the_kept_set(top_k, top_p, ties):
    logits = _case(top_k * 10 + int(top_p * 10), ties)
    positions = logits[0, :-1]
    processed = processed_logprobs(positions, T, top_k, top_p)
    support = kept_sets(processed)
    reference = _reference_kept(positions, top_k, top_p)
    kept = [set(r[r != NO_TOKEN].tolist()) for r in support]
    # the sampler kept exactly the spec's set (up to the order of equal logits at a top-p boundary)
    values = [sorted(positions[t, sorted(k)].tolist()) for t, k in enumerate(kept)]
    assert values == [sorted(positions[t, sorted(k)].tolist()) for t, k in enumerate(reference)]
    if top_p == 1.0:
        assert kept == reference
    if ties:
        assert max(len(k) for k in reference) > top_k  # ties at the k-th logit are kept, as vLLM does
    input_ids = _sampled_targets(kept, seed=top_k)
    targets = input_ids[0, 1:]
    leaf = logits.clone().requires_grad_(True)
    lp, _, log_mass = next_token_logprobs_on_support(leaf, input_ids, support[None], T, replay=True, chunk_tokens=3)
    lp.sum().backward()

    z = (logits[0, :-1].double() / T).requires_grad_(True)
    ref_lp = torch.stack([z[t, targets[t]] - torch.logsumexp(z[t, sorted(kept[t])], 0) for t in range(L - 1)])
    ref_mass = torch.stack([torch.logsumexp(z[t, sorted(kept[t])], 0) - torch.logsumexp(z[t], 0)
                            for t in range(L - 1)])
    ref_lp.sum().backward()
    torch.testing.assert_close(lp[0].double(), ref_lp.detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(log_mass[0].double(), ref_mass.detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(leaf.grad[0, :-1].double(), z.grad / T, atol=1e-5, rtol=0)
    # at equal weights the replayed log-prob IS the sampler's mu: the ratio is 1
    mu = processed.gather(-1, targets[:, None])[:, 0]
    torch.testing.assert_close(lp[0], mu, atol=2e-6, rtol=0)
    if top_k == 1:  # one kept token: log pi = 0 exactly, whatever the logits
        assert (lp == 0).all()


def test_greedy_and_untruncated_sampling_store_nothing():
    assert not truncates(0.0, 20, 0.95)  # greedy ignores top-k / top-p (vLLM and HF alike)
    assert not truncates(0.7, 0, 1.0)
    assert truncates(0.7, 20, 1.0) and truncates(0.7, 0, 0.95)


def test_full_normalisation_with_a_stored_support_is_bit_identical():
    logits = _case(7)
    input_ids = torch.randint(V, (1, L), generator=torch.Generator().manual_seed(1))
    support = kept_sets(processed_logprobs(logits[0, :-1], T, 6, 0.9))[None]
    plain, plain_ent = next_token_logprobs(logits, input_ids, T, with_entropy=True, chunk_tokens=4)
    full, full_ent, _ = next_token_logprobs_on_support(logits, input_ids, support, T, replay=False, with_entropy=True,
                                                       chunk_tokens=4)
    assert torch.equal(plain, full) and torch.equal(plain_ent, full_ent)


def test_positions_without_a_stored_set_use_the_vocabulary_and_keep_finite_gradients():
    logits = _case(3).requires_grad_(True)
    input_ids = torch.randint(V, (1, L), generator=torch.Generator().manual_seed(2))
    support = pad_supports([[] for _ in range(L - 1)], width=4)[None]  # nothing stored anywhere
    lp, _, log_mass = next_token_logprobs_on_support(logits, input_ids, support, T, replay=True)
    plain, _ = next_token_logprobs(logits.detach(), input_ids, T)
    assert torch.equal(lp.detach(), plain) and (log_mass == 0).all()
    lp.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_pad_supports_bounds_the_width_by_the_largest_set():
    out = pad_supports([[5, 3], [], [7]])
    assert out.tolist() == [[5, 3], [NO_TOKEN, NO_TOKEN], [7, NO_TOKEN]]
