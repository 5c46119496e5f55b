"""Server and pool plumbing without a server: request bodies, response parsing, argv and env of a
started server, how a batch is split over engines, which cores each engine gets, weight files."""

from __future__ import annotations

import pytest
import torch

from swerl.errors import ConfigError, InferenceError
from swerl.inference.base import Generation, SamplingParams
from swerl.inference.config import InferenceConfig
from swerl.inference.engine_pool import EnginePool, split_evenly
from swerl.inference.factory import engine_cores, parse_cores
from swerl.inference.vllm_server import completion_request, generation_from_choice, server_command, server_env
from swerl.inference.weight_sync.disk import untied_state_dict, write_weights
from swerl.inference.weight_sync.nccl import check_nccl_supported


def test_completion_request_is_token_in_token_out_with_explicit_sampling() -> None:
    body = completion_request([5, 6], SamplingParams(temperature=0.7, top_k=20, max_new_tokens=9,
                                                     stop_token_ids=[2]), seed=11)
    assert body["prompt"] == [5, 6] and body["return_token_ids"] is True and body["logprobs"] == 0
    assert (body["temperature"], body["top_k"], body["max_tokens"], body["seed"]) == (0.7, 20, 9, 11)
    assert body["stop_token_ids"] == [2] and body["repetition_penalty"] == 1.0 and body["min_p"] == 0.0


def test_choice_parsing_keeps_ids_and_logprobs_and_refuses_gaps() -> None:
    choice = {"token_ids": [4, 2], "logprobs": {"token_logprobs": [-0.5, -0.1]}, "finish_reason": "stop"}
    assert generation_from_choice(choice, 3) == Generation(token_ids=[4, 2], logprobs=[-0.5, -0.1],
                                                           finish_reason="stop", weight_version=3)
    with pytest.raises(InferenceError, match="return_token_ids"):
        generation_from_choice({"logprobs": {"token_logprobs": [-0.5]}, "finish_reason": "stop"}, 0)
    with pytest.raises(InferenceError, match="non-finite"):
        generation_from_choice({**choice, "logprobs": {"token_logprobs": [None, -0.1]}}, 0)
    with pytest.raises(InferenceError, match="abort"):
        generation_from_choice({**choice, "finish_reason": "abort"}, 0)


def test_server_command_and_env_loopback_dev_mode_own_cores() -> None:
    config = InferenceConfig(backend="vllm", vllm_mode="servers", enforce_eager=True, kv_cache_space_gib=2)
    argv = server_command(config, "/m", 8123)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(argv[3::], argv[4::]))
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8123"
    assert flags["--logprobs-mode"] == "processed_logprobs" and "--enforce-eager" in argv
    assert flags["--worker-extension-cls"] == "swerl.inference.vllm_worker.SwerlWorkerExtension"
    env = server_env(config, "1", None, {"PATH": "/bin"})
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert server_env(config, None, "GPU-5e1f", {})["CUDA_VISIBLE_DEVICES"] == "GPU-5e1f"  # as the parent names it


def test_split_evenly_contiguous_first_shares_larger() -> None:
    assert split_evenly(5, 2) == [range(0, 3), range(3, 5)]
    assert split_evenly(1, 3) == [range(0, 1), range(1, 1), range(1, 1)]


class Recorder:
    """An engine that answers with its own name's id, to see which engine served which prompt."""

    def __init__(self, mark: int) -> None:
        self.mark, self.weight_version, self.calls = mark, 0, []

    def generate(self, prompts, sampling, seeds=None):
        self.calls.append((prompts, seeds))
        return [Generation(token_ids=[self.mark], logprobs=[-1.0], finish_reason="stop",
                           weight_version=self.weight_version) for _ in prompts]

    def reload_weights(self, folder, version, repack_tied=True):
        self.weight_version = version


def test_pool_spreads_a_batch_over_engines_in_order_and_versions_all() -> None:
    engines = [Recorder(0), Recorder(1)]
    pool = EnginePool(engines)
    out = pool.generate([[1], [2], [3]], SamplingParams(), seeds=[7, 8, 9])
    assert [g.token_ids[0] for g in out] == [0, 0, 1]
    assert engines[0].calls == [([[1], [2]], [7, 8])] and engines[1].calls == [([[3]], [9])]
    pool.reload_weights("/w", 4)
    assert pool.weight_version == 4 and all(g.weight_version == 4 for g in pool.generate([[1], [2]], SamplingParams()))
    pool.weight_version = 9  # a resumed run sets it
    assert [e.weight_version for e in engines] == [9, 9]


def test_engine_cores_one_core_per_engine_leaving_the_rest() -> None:
    servers = InferenceConfig(backend="vllm", vllm_mode="servers", num_servers=1)
    assert engine_cores(servers, [0, 1]) == ["0"]
    assert engine_cores(servers.model_copy(update={"num_servers": 2}), [0, 1]) == ["0", "1"]
    assert engine_cores(InferenceConfig(backend="vllm"), [0]) == [None]  # in-process, one core: no binding
    assert engine_cores(InferenceConfig(backend="vllm", cpu_cores=["3"]), [0, 1]) == ["3"]
    assert parse_cores("0-2,5") == {0, 1, 2, 5} and parse_cores("1") == {1}
    with pytest.raises(ValueError, match="cpu_cores lists 1 core sets for 2 engines"):
        InferenceConfig(backend="vllm", vllm_mode="servers", num_servers=2, cpu_cores=["0"])


def test_weights_written_once_per_storage_cast_and_versioned(tmp_path) -> None:
    from safetensors import safe_open

    embed = torch.randn(4, 2)
    state = {"model.embed_tokens.weight": embed, "lm_head.weight": embed, "norm.weight": torch.ones(2)}
    assert list(untied_state_dict(state, torch.bfloat16)) == ["model.embed_tokens.weight", "norm.weight"]
    folder = write_weights(state, tmp_path / "sync", torch.bfloat16, version=7)
    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        assert handle.metadata()["weight_version"] == "7"
        assert handle.get_tensor("model.embed_tokens.weight").dtype == torch.bfloat16
    assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors"]


def test_nccl_refused_on_cpu_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="weight_sync=disk"):
        check_nccl_supported(on_cpu=True)
    check_nccl_supported(on_cpu=False)
