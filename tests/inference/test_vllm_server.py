"""Server and pool plumbing without a vLLM server: request bodies, response parsing, how a batch is split over engines, which cores each engine gets, weight
files, the checks of a server's answers (prefix-cache reset, routes) and of the NCCL sync's API."""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from swerl.errors import ConfigError, EnvironmentProblem, InferenceError
from swerl.inference.backends.base import ContinuousBackend, Generation, SamplingParams
from swerl.inference.config import VLLMGenerator
from swerl.inference.engines.engine_pool import EnginePool, PrefixRoutes, split_evenly
from swerl.inference.factory import engine_cores, parse_cores
from swerl.inference.engines.vllm_server import VLLMServerBackend, completion_request, generation_from_choice
from swerl.inference.weight_sync.disk import untied_state_dict, write_weights
from swerl.inference.weight_sync.nccl import cast_source, check_nccl_supported, check_transfer_api, sender_rank


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
    servers = VLLMGenerator(vllm_mode="servers", num_servers=1)
    assert engine_cores(servers, [0, 1]) == ["0"]
    assert engine_cores(servers.model_copy(update={"num_servers": 2}), [0, 1]) == ["0", "1"]
    assert engine_cores(VLLMGenerator(), [0]) == [None]  # in-process, one core: no binding
    assert engine_cores(VLLMGenerator(cpu_cores=["3"]), [0, 1]) == ["3"]
    assert parse_cores("0-2,5") == {0, 1, 2, 5} and parse_cores("1") == {1}
    with pytest.raises(ValueError, match="cpu_cores lists 1 core sets for 2 engines"):
        VLLMGenerator(vllm_mode="servers", num_servers=2, cpu_cores=["0"])


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


class _Answers(BaseHTTPRequestHandler):
    """A local HTTP server that answers like a vLLM server whose prefix-cache reset keeps failing
    (blocks held by running requests) and that lacks the dev routes."""

    resets = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        type(self).resets += 1
        self._json({"success": False})

    def do_GET(self) -> None:  # noqa: N802
        self._json({"paths": {"/v1/completions": {}, "/health": {}}})

    def _json(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def test_a_refused_prefix_cache_reset_and_missing_routes_are_errors_not_ignored() -> None:
    httpd = HTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        server = VLLMServerBackend(f"http://127.0.0.1:{httpd.server_port}", timeout_s=10)
        with pytest.raises(InferenceError, match="refused to reset its prefix cache 3 times"):
            server.reset_prefix_cache(attempts=3, wait_s=0.01)
        assert _Answers.resets == 3
        with pytest.raises(InferenceError, match="refused to reset"):
            server.reload_weights("/nowhere", 1)  # the reload itself is answered, the reset is not: no new version
        assert server.weight_version == 0
        with pytest.raises(EnvironmentProblem, match=r"has no /collective_rpc route, which generator.weight_sync=disk "
                                                     r"needs; fix: start it with VLLM_SERVER_DEV_MODE=1"):
            server.check_reload_api()
    finally:
        httpd.shutdown()


def test_nccl_sync_api_is_checked_and_its_source_casts_before_gathering(monkeypatch) -> None:
    pytest.importorskip("vllm")
    check_transfer_api()  # the installed vLLM (0.32 here) has the trainer-side classes
    assert sender_rank(is_owner=True) == 0 and sender_rank(is_owner=False) == 1
    model = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5))
    model[1].weight = model[0].weight  # tied: sent once
    source = cast_source(model, torch.bfloat16)
    meta = source.metadata()
    assert [(m.name, m.dtype, m.shape) for m in meta] == [("0.weight", torch.bfloat16, (5, 3)),
                                                          ("1.bias", torch.bfloat16, (5,))]
    sent = list(source)
    assert [name for name, _ in sent] == ["0.weight", "1.bias"] and all(t.dtype == torch.bfloat16 for _, t in sent)
    assert torch.equal(sent[0][1], model[0].weight.detach().bfloat16())
    monkeypatch.setitem(sys.modules, "vllm.distributed.weight_transfer.factory", None)  # an older vLLM
    with pytest.raises(EnvironmentProblem, match=r"weight_sync=nccl needs vLLM's weight-transfer API .*vLLM 0\."):
        check_transfer_api()


class _Held(ContinuousBackend):
    """A continuous engine that keeps every request in flight until the test finishes it."""

    def __init__(self, mark: int) -> None:
        self.mark, self.weight_version, self.futures = mark, 0, []

    def submit(self, prompt, sampling):
        self.futures.append(Future())
        return self.futures[-1]

    def finish(self) -> None:
        for future in self.futures:
            if not future.done():
                future.set_result(Generation(token_ids=[self.mark], logprobs=[-1.0], finish_reason="stop"))


def test_pool_sends_each_request_to_the_engine_with_fewest_in_flight() -> None:
    engines = [_Held(0), _Held(1)]
    pool = EnginePool(engines)
    firsts = [pool.submit([1], SamplingParams()) for _ in range(3)]  # 0, 1, then 0 again (tie: in turn)
    assert [len(e.futures) for e in engines] == [2, 1]
    engines[0].finish()  # engine 0 is idle again, engine 1 still has one in flight
    assert [f.done() for f in firsts] == [True, False, True] and firsts[2].result().token_ids == [0]
    pool.submit([2], SamplingParams())  # to engine 0 (0 in flight < 1)
    pool.submit([3], SamplingParams())  # a tie (1 and 1): engine 1, whose turn it is
    assert [len(e.futures) for e in engines] == [3, 2]


def test_prefix_routes_find_the_engine_of_the_turn_a_prompt_continues() -> None:
    routes = PrefixRoutes()
    prompt, reply = list(range(100, 140)), list(range(500, 560))  # 40 prompt tokens, 60 reply tokens
    routes.remember(prompt, reply, engine=1)
    assert routes.lookup(prompt + reply + [7, 8]) == 1  # the next turn: the whole served sequence
    rerendered = prompt + reply[:20] + [9] * 30  # the template rendered the reply again, differently
    assert routes.lookup(rerendered) == 1  # matched at the 16-token mark
    assert routes.lookup(prompt) is None  # a group sibling's identical first prompt: no proper prefix
    assert routes.lookup([100, 101] + reply) is None
    routes.remember(prompt + reply + [7, 8], [600, 601], engine=0)  # the next turn, served elsewhere
    assert routes.lookup(prompt + reply + [7, 8, 600, 601, 3]) == 0  # the longest prefix wins
    small = PrefixRoutes(capacity=2)
    small.remember([1, 2], [3], engine=0)  # two keys: [1, 2] and [1, 2, 3]
    small.remember([4, 5], [6], engine=1)  # evicts both of the first
    assert small.lookup([1, 2, 3, 9]) is None and small.lookup([4, 5, 6, 9]) == 1


def test_pool_sends_a_continued_turn_back_to_its_engine_within_the_load_bound() -> None:
    engines = [_Held(0), _Held(1)]
    pool = EnginePool(engines)
    turn1 = [pool.submit([1, 2, 3], SamplingParams()) for _ in range(2)]  # siblings: spread by load
    assert [len(e.futures) for e in engines] == [1, 1]
    engines[1].finish()
    assert turn1[1].result().token_ids == [1]
    for k in range(3):  # new episodes, by load: engines 1, 0, 1
        pool.submit([40 + k, 41], SamplingParams())
    assert [len(e.futures) for e in engines] == [2, 3]
    pool.submit([1, 2, 3, 1, 9], SamplingParams())  # continues engine 1's turn: 2 in flight there vs 2
    assert [len(e.futures) for e in engines] == [2, 4]
    assert pool.routed == {"affinity": 1, "least_loaded": 5, "overloaded": 0}
    engines[0].finish()  # engine 0 idle: engine 1 may hold at most 2 x 0 + 4 in flight for affinity
    for k in range(3):  # more turns continuing engine 1's episode: 3 and 4 in flight there, then 5
        pool.submit([1, 2, 3, 1, 9, k], SamplingParams())
    assert [len(e.futures) for e in engines] == [3, 6]
    assert pool.routed == {"affinity": 3, "least_loaded": 5, "overloaded": 1}


class _Recorder(_Answers):
    """Answers every POST with success and records its path and query."""

    paths: list[str] = []

    def do_POST(self) -> None:  # noqa: N802
        type(self).paths.append(self.path)
        if self.path.startswith("/pause") and "mode=keep" not in self.path:
            self.send_response(404)
            self.end_headers()
            return
        self._json({"success": True})


def test_pause_keeps_requests_and_the_reset_after_a_reload_preempts_them() -> None:
    """``/pause?mode=keep`` (not vLLM's default, abort), ``/resume``, and a prefix-cache reset that
    preempts the paused requests (they recompute their KV with the new weights)."""
    httpd = HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        server = VLLMServerBackend(f"http://127.0.0.1:{httpd.server_port}", timeout_s=10)
        assert server.can_pause
        server.pause()
        server.reload_weights("/new", 3)
        server.resume()
        assert _Recorder.paths == ["/pause?mode=keep", "/collective_rpc",
                                   "/reset_prefix_cache?reset_running_requests=true", "/resume"]
        assert server.weight_version == 3
    finally:
        httpd.shutdown()
