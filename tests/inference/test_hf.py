"""HFBackend on a tiny random Llama: exact sampling log-probs, batching, seeds, stops, weights."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from swerl.errors import InferenceError
from swerl.inference.backends.base import GenerationBackend, SamplingParams
from swerl.inference.backends.hf import HFBackend
from swerl.inference.backends.sampling import processed_logprobs

PROMPTS = [[1, 24, 22, 8, 21, 36, 11, 12], [1, 9, 10], [1, 30, 31, 32, 33, 34]]


def manual_logprobs(model: LlamaForCausalLM, prompt: list[int], generated: list[int], sampling: SamplingParams):
    """Separate full forward over prompt + generated ids: processed log-probs (T, V) of each step."""
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : len(prompt) + len(generated) - 1]
    return processed_logprobs(logits, sampling.temperature, sampling.top_k, sampling.top_p)


@pytest.fixture
def backend(tiny_model: LlamaForCausalLM, tiny_tokenizer: PreTrainedTokenizerFast) -> HFBackend:
    return HFBackend(tiny_model, tiny_tokenizer, seed=0)


def test_backend_satisfies_protocol(backend: HFBackend) -> None:
    assert isinstance(backend, GenerationBackend)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_logprobs_equal_log_softmax_of_scaled_logits(backend: HFBackend, temperature: float) -> None:
    sampling = SamplingParams(temperature=temperature, max_new_tokens=12, seed=3)
    for prompt, gen in zip(PROMPTS, backend.generate(PROMPTS, sampling), strict=True):
        ids = torch.tensor([prompt + gen.token_ids])
        with torch.no_grad():
            logits = backend.model(ids).logits[0, len(prompt) - 1 : -1].float()
        expected = torch.log_softmax(logits / temperature, dim=-1).gather(-1, torch.tensor(gen.token_ids)[:, None])
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected[:, 0], atol=1e-5, rtol=0)


def test_top_k_top_p_logprobs_renormalised_over_kept_tokens(backend: HFBackend) -> None:
    sampling = SamplingParams(temperature=0.7, top_k=5, top_p=0.9, max_new_tokens=12, seed=5)
    for prompt, gen in zip(PROMPTS, backend.generate(PROMPTS, sampling), strict=True):
        steps = manual_logprobs(backend.model, prompt, gen.token_ids, sampling)
        expected = steps.gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
        assert torch.isfinite(expected).all(), "sampled a token outside top-k/top-p"
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-5, rtol=0)
        plain = sampling.model_copy(update={"top_k": 0, "top_p": 1.0})
        unfiltered = manual_logprobs(backend.model, prompt, gen.token_ids, plain)
        raw_mu = unfiltered.gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
        assert (expected > raw_mu).all(), "filtering must renormalise mass onto the kept tokens"


def test_greedy_picks_argmax_and_reports_pre_temperature_logprobs(backend: HFBackend) -> None:
    gen = backend.generate([PROMPTS[0]], SamplingParams(temperature=0.0, max_new_tokens=10))[0]
    ids = torch.tensor([PROMPTS[0] + gen.token_ids])
    with torch.no_grad():
        logits = backend.model(ids).logits[0, len(PROMPTS[0]) - 1 : -1]
    assert gen.token_ids == logits.argmax(-1).tolist()
    expected = torch.log_softmax(logits, -1).max(-1).values
    torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batched_unequal_prompts_match_unbatched(backend: HFBackend, temperature: float) -> None:
    sampling = SamplingParams(temperature=temperature, max_new_tokens=10, seed=11)
    batched = backend.generate(PROMPTS, sampling)
    for prompt, gen in zip(PROMPTS, batched, strict=True):
        alone = backend.generate([prompt], sampling)[0]
        assert alone.token_ids == gen.token_ids
        torch.testing.assert_close(torch.tensor(alone.logprobs), torch.tensor(gen.logprobs), atol=1e-5, rtol=0)


def test_same_seed_reproduces_and_other_seed_differs(backend: HFBackend) -> None:
    run = lambda seed: [g.token_ids for g in backend.generate(PROMPTS, SamplingParams(max_new_tokens=16, seed=seed))]
    assert run(1) == run(1)
    assert run(1) != run(2)


def test_unseeded_rows_differ_and_backend_rng_state_restores(backend: HFBackend) -> None:
    sampling = SamplingParams(max_new_tokens=16)
    state = backend.rng_state()
    first = backend.generate([PROMPTS[0]] * 4, sampling)
    assert len({tuple(g.token_ids) for g in first}) > 1
    backend.set_rng_state(state)
    assert [g.token_ids for g in backend.generate([PROMPTS[0]] * 4, sampling)] == [g.token_ids for g in first]


def test_generation_leaves_global_torch_rng_untouched(backend: HFBackend) -> None:
    before = torch.get_rng_state()
    backend.generate(PROMPTS, SamplingParams(max_new_tokens=8))
    assert torch.equal(torch.get_rng_state(), before)


def test_stop_token_kept_ids_after_it_trimmed(backend: HFBackend) -> None:
    free = backend.generate([PROMPTS[0]], SamplingParams(temperature=0.0, max_new_tokens=10))[0]
    stop_id = free.token_ids[3]
    first = free.token_ids.index(stop_id)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=10, stop_token_ids=[stop_id])
    gen = backend.generate([PROMPTS[0]], sampling)[0]
    assert gen.token_ids == free.token_ids[: first + 1]
    assert gen.finish_reason == "stop" and len(gen.logprobs) == len(gen.token_ids)


def test_eos_ends_row_while_others_run_to_budget(backend: HFBackend) -> None:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=10)
    free = backend.generate(PROMPTS, sampling)
    stop_id = free[1].token_ids[0]  # a token the second row emits first
    gens = backend.generate(PROMPTS, sampling.model_copy(update={"stop_token_ids": [stop_id]}))
    assert gens[1].token_ids == [stop_id] and gens[1].finish_reason == "stop"
    for free_row, gen in zip(free, gens, strict=True):
        if stop_id not in free_row.token_ids:
            assert gen.token_ids == free_row.token_ids and gen.finish_reason == free_row.finish_reason


def test_stop_string_ends_row_at_token_completing_it(backend: HFBackend, tiny_tokenizer) -> None:
    free = backend.generate([PROMPTS[0]], SamplingParams(temperature=0.0, max_new_tokens=12))[0]
    text = tiny_tokenizer.decode(free.token_ids)
    stop = text[4:6]
    gen = backend.generate([PROMPTS[0]], SamplingParams(temperature=0.0, max_new_tokens=12, stop=[stop]))[0]
    assert gen.finish_reason == "stop"
    assert stop in tiny_tokenizer.decode(gen.token_ids)
    assert stop not in tiny_tokenizer.decode(gen.token_ids[:-1])
    assert gen.token_ids == free.token_ids[: len(gen.token_ids)]


def test_length_finish_reason_on_budget(backend: HFBackend) -> None:
    gens = backend.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=5))
    for gen in gens:
        hit_eos = bool(backend.eos_token_ids() & set(gen.token_ids))
        assert gen.finish_reason == ("stop" if hit_eos else "length")
        assert hit_eos or len(gen.token_ids) == 5
    assert any(gen.finish_reason == "length" for gen in gens)


def test_update_weights_copies_in_place_and_bumps_version(backend: HFBackend) -> None:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=6)
    before = backend.generate([PROMPTS[0]], sampling)[0]
    weight = backend.model.lm_head.weight
    pointer = weight.data_ptr()
    assert backend.update_weights({"lm_head.weight": torch.randn_like(weight)}) == 1
    after = backend.generate([PROMPTS[0]], sampling)[0]
    assert weight.data_ptr() == pointer and backend.model.lm_head.weight is weight
    assert after.weight_version == before.weight_version + 1
    assert after.logprobs != before.logprobs


def test_update_weights_rejects_unknown_name_without_applying(backend: HFBackend) -> None:
    weight = backend.model.lm_head.weight.detach().clone()
    with pytest.raises(InferenceError, match="no parameter"):
        backend.update_weights([("lm_head.weight", torch.zeros_like(weight)), ("nope", torch.zeros(1))])
    assert torch.equal(backend.model.lm_head.weight, weight) and backend.weight_version == 0


def test_set_model_generates_with_new_module(backend: HFBackend, make_tiny_model) -> None:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=6)
    before = backend.generate([PROMPTS[0]], sampling)[0]
    backend.set_model(make_tiny_model(seed=1))
    after = backend.generate([PROMPTS[0]], sampling)[0]
    assert after.weight_version == 1 and after.logprobs != before.logprobs


def test_train_mode_restored_after_generate(backend: HFBackend) -> None:
    backend.model.train()
    backend.generate([PROMPTS[0]], SamplingParams(max_new_tokens=2))
    assert backend.model.training


def test_empty_prompt_rejected(backend: HFBackend) -> None:
    with pytest.raises(InferenceError, match="empty prompt"):
        backend.generate([[1, 2], []], SamplingParams(max_new_tokens=2))


def test_model_generation_config_cannot_alter_sampling(backend: HFBackend) -> None:
    # Checkpoints ship sampling defaults (Qwen3: do_sample, T=0.6, top_k=20); none may leak into mu.
    config = backend.model.generation_config
    config.do_sample, config.temperature, config.top_k, config.repetition_penalty = True, 0.3, 3, 1.5
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10, seed=1)
    gen = backend.generate([PROMPTS[0]], sampling)[0]
    steps = manual_logprobs(backend.model, PROMPTS[0], gen.token_ids, sampling)
    expected = steps.gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-5, rtol=0)
    assert backend.model.generation_config is config  # restored after the call


def test_a_batch_is_a_phase_whose_count_is_the_tokens_sampled_per_row(backend: HFBackend) -> None:
    import contextlib

    from swerl.logs import set_phase_display

    seen = []

    @contextlib.contextmanager
    def record(clock):  # noqa: ANN001, ANN202 - a PhaseDisplay that keeps the clocks it showed
        seen.append(clock)
        yield

    previous = set_phase_display(record)
    try:
        gens = backend.generate(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=7, seed=3))
    finally:
        set_phase_display(previous)
    (clock,) = seen
    assert clock.name == "generate (batch of 3)" and (clock.total, clock.unit) == (7, "tokens/row")
    assert clock.done == max(len(g.token_ids) for g in gens) > 0  # one per decode step, not a made-up figure
