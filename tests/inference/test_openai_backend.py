"""OpenAIBackend against a real HTTP server on 127.0.0.1 that serves the tiny HF model
(OpenAI /v1/completions and /v1/chat/completions, vLLM-style ``token_id:<n>`` tokens)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from swerl.errors import InferenceError
from swerl.inference.backends.base import GenerationBackend, SamplingParams
from swerl.inference.backends.hf import HFBackend
from swerl.inference.backends.openai_backend import OpenAIBackend

PROMPT = [1, 24, 22, 8, 21, 36, 11, 12]


def serve(backend: HFBackend, with_logprobs: bool) -> ThreadingHTTPServer:
    """A minimal OpenAI-compatible server generating with ``backend``; without logprobs it
    answers text only, like a server that does not return them."""
    lock = threading.Lock()
    tokenizer = backend.tokenizer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep pytest output clean
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/v1/completions":
                prompt = body["prompt"]
                ids = prompt if isinstance(prompt, list) else tokenizer.encode(prompt, add_special_tokens=False)
            elif self.path == "/v1/chat/completions":
                ids = tokenizer.apply_chat_template(
                    body["messages"], add_generation_prompt=True, tokenize=True, return_dict=False
                )
            else:
                self.send_error(404)
                return
            sampling = SamplingParams(
                temperature=body["temperature"],
                top_p=body["top_p"],
                top_k=body.get("top_k", 0),
                max_new_tokens=body["max_tokens"],
                seed=body.get("seed"),
                stop=body.get("stop", []),
                stop_token_ids=body.get("stop_token_ids", []),
            )
            with lock:
                gen = backend.generate([ids], sampling)[0]
            tokens = [f"token_id:{token}" for token in gen.token_ids]
            text = tokenizer.decode(gen.token_ids, skip_special_tokens=True)
            choice = {"index": 0, "finish_reason": gen.finish_reason}
            if self.path == "/v1/completions":
                choice["text"] = text
                if with_logprobs:
                    choice["logprobs"] = {"tokens": tokens, "token_logprobs": gen.logprobs}
            else:
                choice["message"] = {"role": "assistant", "content": text}
                if with_logprobs:
                    content = [{"token": t, "logprob": lp} for t, lp in zip(tokens, gen.logprobs, strict=True)]
                    choice["logprobs"] = {"content": content}
            payload = json.dumps({"choices": [choice]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def hf(tiny_model, tiny_tokenizer) -> HFBackend:
    return HFBackend(tiny_model, tiny_tokenizer, seed=0)


@pytest.fixture(params=[True, False], ids=["logprobs", "text-only"])
def server(request, hf: HFBackend) -> Iterator[tuple[str, bool]]:
    srv = serve(hf, with_logprobs=request.param)
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", request.param
    srv.shutdown()
    srv.server_close()


def test_completions_round_trip_matches_local_generation(server, hf: HFBackend, tiny_tokenizer) -> None:
    url, with_logprobs = server
    client = OpenAIBackend(url, model="tiny", tokenizer=tiny_tokenizer)
    assert isinstance(client, GenerationBackend)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=8)
    remote = client.generate([PROMPT, PROMPT[:4]], sampling)
    local = hf.generate([PROMPT, PROMPT[:4]], sampling)
    for got, want in zip(remote, local, strict=True):
        assert got.finish_reason == want.finish_reason
        if with_logprobs:
            assert got.token_ids == want.token_ids and got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
        else:
            assert got.logprobs is None
            assert tiny_tokenizer.decode(got.token_ids, skip_special_tokens=True) == tiny_tokenizer.decode(
                want.token_ids, skip_special_tokens=True
            )
            if want.finish_reason == "stop":
                assert got.token_ids[-1] == want.token_ids[-1] == tiny_tokenizer.eos_token_id


def test_seeded_sampling_round_trip_is_reproducible(server, tiny_tokenizer) -> None:
    url, _ = server
    client = OpenAIBackend(url, tokenizer=tiny_tokenizer)
    sampling = SamplingParams(temperature=1.0, top_k=5, max_new_tokens=8, seed=4)
    assert [g.token_ids for g in client.generate([PROMPT] * 2, sampling)] == [
        g.token_ids for g in client.generate([PROMPT] * 2, sampling)
    ]


def test_chat_round_trip_returns_reply_ids(server, hf: HFBackend, tiny_tokenizer) -> None:
    url, with_logprobs = server
    client = OpenAIBackend(url, tokenizer=tiny_tokenizer, endpoint="chat")
    messages = [{"role": "user", "content": "hi there"}]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=6)
    (got,) = client.generate_chat([messages], sampling)
    prompt = tiny_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    want = hf.generate([prompt], sampling)[0]
    assert got.finish_reason == want.finish_reason
    assert (got.logprobs is not None) == with_logprobs
    if with_logprobs:
        assert got.token_ids == want.token_ids
    with pytest.raises(InferenceError, match="chat mode"):
        client.generate([PROMPT], sampling)


def test_unreachable_server_raises_inference_error(tiny_tokenizer) -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = srv.server_address[1]
    srv.server_close()
    client = OpenAIBackend(f"http://127.0.0.1:{port}/v1", tokenizer=tiny_tokenizer, timeout_s=5)
    with pytest.raises(InferenceError, match="failed"):
        client.generate([PROMPT], SamplingParams(max_new_tokens=2))


def test_http_error_status_raises_with_body(hf: HFBackend, tiny_tokenizer) -> None:
    srv = serve(hf, with_logprobs=True)
    try:
        client = OpenAIBackend(f"http://127.0.0.1:{srv.server_address[1]}/nope", tokenizer=tiny_tokenizer)
        with pytest.raises(InferenceError, match="HTTP 404"):
            client.generate([PROMPT], SamplingParams(max_new_tokens=2))
    finally:
        srv.shutdown()
        srv.server_close()
