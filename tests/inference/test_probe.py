"""Parity probe: ~0 gap when backend and trainer share weights, an error when they diverge."""

from __future__ import annotations

import pytest

from swerl.errors import InferenceError
from swerl.inference.backends.base import SamplingParams
from swerl.inference.backends.hf import HFBackend
from swerl.inference.probe import logprob_gap

PROMPT = [1, 24, 22, 8, 21, 36, 11, 12]
SAMPLING = SamplingParams(temperature=0.7, top_k=8, max_new_tokens=8, seed=2, stop_token_ids=[])


def test_shared_weights_give_zero_gap(tiny_model, tiny_tokenizer) -> None:
    metrics = logprob_gap([HFBackend(tiny_model, tiny_tokenizer)], tiny_model, PROMPT, SAMPLING, max_mean_abs_diff=1e-4)
    assert metrics["inference/logprob_diff_max"] < 1e-5 and metrics["inference/probe_tokens"] > 0


def test_stale_backend_weights_fail_the_probe(tiny_model, tiny_tokenizer, make_tiny_model) -> None:
    stale = HFBackend(make_tiny_model(seed=1), tiny_tokenizer)
    with pytest.raises(InferenceError, match="stale or half-applied"):
        logprob_gap([stale], tiny_model, PROMPT, SAMPLING, max_mean_abs_diff=1e-3)
