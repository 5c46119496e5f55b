"""Processed log-probs (temperature, top-k, top-p) and row endings, on worked examples."""

from __future__ import annotations

import math

import pytest
import torch

from swerl.inference.backends.sampling import finish_row, processed_logprobs, sample_rows


def test_plain_temperature_equals_log_softmax_of_scaled_logits() -> None:
    logits = torch.randn(3, 11)
    got = processed_logprobs(logits, temperature=0.7, top_k=0, top_p=1.0)
    torch.testing.assert_close(got, torch.log_softmax(logits / 0.7, dim=-1))


def test_greedy_returns_pre_temperature_distribution() -> None:
    logits = torch.randn(2, 5)
    torch.testing.assert_close(processed_logprobs(logits, 0.0, top_k=2, top_p=0.1), torch.log_softmax(logits, -1))


def test_top_p_keeps_smallest_set_reaching_mass_and_renormalises() -> None:
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    got = processed_logprobs(logits, 1.0, top_k=0, top_p=0.7).exp()
    torch.testing.assert_close(got, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))


def test_top_p_always_keeps_the_most_likely_token() -> None:
    logits = torch.tensor([[0.9, 0.1]]).log()
    got = processed_logprobs(logits, 1.0, top_k=0, top_p=0.05)
    assert got[0, 0].item() == pytest.approx(0.0) and got[0, 1].item() == -math.inf


def test_top_k_then_temperature_renormalises_over_kept_tokens() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 3.0]])
    got = processed_logprobs(logits, 2.0, top_k=2, top_p=1.0)
    kept = torch.log_softmax(torch.tensor([2.0, 3.0]) / 2.0, dim=-1)
    assert got[0, 0].item() == pytest.approx(kept[0].item())
    assert got[0, 4].item() == pytest.approx(kept[1].item())
    assert torch.isinf(got[0, [1, 2, 3]]).all()


def test_top_k_and_top_p_compose_in_vllm_order() -> None:
    # T=1: top-k=3 keeps (0.4, 0.3, 0.2) -> renormalised (4/9, 3/9, 2/9); top-p=0.6 then keeps two.
    logits = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log()
    got = processed_logprobs(logits, 1.0, top_k=3, top_p=0.6).exp()
    torch.testing.assert_close(got, torch.tensor([[4 / 7, 3 / 7, 0.0, 0.0]]))


def test_sample_rows_only_draws_kept_tokens_and_is_seeded_per_row() -> None:
    logprobs = processed_logprobs(torch.randn(4, 50), 1.0, top_k=3, top_p=1.0)
    draws = [sample_rows(logprobs, [torch.Generator().manual_seed(7) for _ in range(4)]) for _ in range(2)]
    assert torch.equal(draws[0], draws[1])
    assert torch.isfinite(logprobs.gather(-1, draws[0][:, None])).all()


def test_finish_row_keeps_first_stop_token() -> None:
    assert finish_row([5, 6, 2, 9, 0], {2}, None, 5) == (3, "stop")


def test_finish_row_earliest_of_stop_string_and_stop_token() -> None:
    assert finish_row([5, 6, 7, 2, 0], {2}, 2, 5) == (2, "stop")
    assert finish_row([5, 2, 7, 8, 0], {2}, 4, 5) == (2, "stop")


def test_finish_row_length_when_budget_used() -> None:
    assert finish_row([5, 6, 7], {2}, None, 3) == (3, "length")
