"""Generation through any OpenAI-compatible server (vLLM, SGLang, llama.cpp, ...), for evaluating a
served model: ``/v1/completions`` with token-id prompts, or ``/v1/chat/completions`` with messages.

Token ids come back exactly when the server returns them (vLLM's ``return_tokens_as_token_ids``
gives ``token_id:<n>`` tokens); otherwise they are re-encoded from the text with the local
tokenizer and the log-probs are dropped (None), because they could not be aligned token by token.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

import requests

from swerl.errors import InferenceError
from swerl.inference.backends.base import Generation, SamplingParams

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


def completion_body(model: str, prompt: list[int] | str, sampling: SamplingParams, seed: int | None) -> dict[str, Any]:
    """JSON body of ``POST /completions``; vLLM's extra fields are ignored by servers that lack them."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "logprobs": 0,
        "return_tokens_as_token_ids": True,
        "skip_special_tokens": False,
    }
    return _add_common(body, sampling, seed)


def chat_body(model: str, messages: list[dict[str, Any]], sampling: SamplingParams, seed: int | None) -> dict[str, Any]:
    """JSON body of ``POST /chat/completions`` asking for the sampled tokens' log-probs."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "logprobs": True,
        "return_tokens_as_token_ids": True,
        "skip_special_tokens": False,
    }
    return _add_common(body, sampling, seed)


def _add_common(body: dict[str, Any], sampling: SamplingParams, seed: int | None) -> dict[str, Any]:
    if seed is not None:
        body["seed"] = seed
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.top_k:
        body["top_k"] = sampling.top_k
    if sampling.stop_token_ids:
        body["stop_token_ids"] = list(sampling.stop_token_ids)
    return body


def parse_tokens(
    tokens: list[str] | None, logprobs: list[float | None] | None
) -> tuple[list[int] | None, list[float] | None]:
    """Exact ids from ``token_id:<n>`` tokens (else None) and finite log-probs (else None).

    Args:
        tokens: the server's per-token strings, or None when it returned no log-prob block.
        logprobs: the per-token log-probs aligned with ``tokens``.
    """
    if not tokens:
        return None, None
    matches = [_TOKEN_ID.match(token) for token in tokens]
    ids = [int(match.group(1)) for match in matches] if all(matches) else None
    values = None
    if logprobs is not None and len(logprobs) == len(tokens) and all(
        value is not None and math.isfinite(value) for value in logprobs
    ):
        values = [float(value) for value in logprobs]
    return ids, values


class OpenAIBackend:
    """``GenerationBackend`` over an OpenAI-compatible HTTP server (one request per prompt, concurrent).

    Args:
        base_url: server root including ``/v1``, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name sent in each request.
        tokenizer: local tokenizer of the served model (chat template, fallback re-encoding); may be None
            when the server returns token ids.
        api_key: sent as ``Authorization: Bearer``; None sends none.
        endpoint: ``completions`` (token-id prompts) or ``chat`` (messages; use :meth:`generate_chat`).
        timeout_s: per-request timeout, seconds. max_concurrency: requests in flight at once.
    """

    def __init__(
        self,
        base_url: str,
        model: str = "default",
        tokenizer: PreTrainedTokenizerBase | None = None,
        api_key: str | None = None,
        endpoint: Literal["completions", "chat"] = "completions",
        timeout_s: float = 600.0,
        max_concurrency: int = 8,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tokenizer = tokenizer
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.weight_version = 0
        self._session = requests.Session()
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"

    def generate(
        self, prompts: list[list[int]], sampling: SamplingParams, seeds: list[int | None] | None = None
    ) -> list[Generation]:
        """Sample one continuation per token-id prompt via ``/completions``.

        Raises:
            InferenceError: the server is unreachable, answers with an error, or the backend is in chat mode.
        """
        if self.endpoint == "chat":
            raise InferenceError("openai backend in chat mode takes messages: call generate_chat (or use completions)")
        row_seeds = seeds if seeds is not None else [sampling.seed] * len(prompts)
        bodies = [completion_body(self.model, list(p), sampling, s) for p, s in zip(prompts, row_seeds, strict=True)]
        return self._map(lambda body: self._complete(body, sampling), bodies)

    def generate_chat(self, conversations: list[list[dict[str, Any]]], sampling: SamplingParams) -> list[Generation]:
        """Sample one assistant reply per conversation (list of ``{"role", "content"}``) via ``/chat/completions``."""
        bodies = [chat_body(self.model, messages, sampling, sampling.seed) for messages in conversations]
        return self._map(lambda body: self._chat(body, sampling), bodies)

    def _map(self, fn: Callable[[dict[str, Any]], Generation], bodies: list[dict[str, Any]]) -> list[Generation]:
        if len(bodies) <= 1:
            return [fn(body) for body in bodies]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(bodies))) as pool:
            return list(pool.map(fn, bodies))

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/{path}"
        try:
            response = self._session.post(url, json=body, timeout=self.timeout_s)
        except requests.RequestException as err:
            raise InferenceError(f"openai backend: POST {url} failed: {err.__class__.__name__}: {err}") from err
        if response.status_code != 200:
            raise InferenceError(f"openai backend: POST {url} -> HTTP {response.status_code}: {response.text[:300]}")
        try:
            return response.json()
        except ValueError as err:
            raise InferenceError(f"openai backend: POST {url} returned non-JSON: {response.text[:200]}") from err

    def _complete(self, body: dict[str, Any], sampling: SamplingParams) -> Generation:
        choice = self._post("completions", body)["choices"][0]
        block = choice.get("logprobs") or {}
        ids, logprobs = parse_tokens(block.get("tokens"), block.get("token_logprobs"))
        return self._generation(choice.get("text", ""), ids, logprobs, choice, sampling)

    def _chat(self, body: dict[str, Any], sampling: SamplingParams) -> Generation:
        choice = self._post("chat/completions", body)["choices"][0]
        content = (choice.get("logprobs") or {}).get("content") or []
        tokens = [entry.get("token", "") for entry in content] or None
        ids, logprobs = parse_tokens(tokens, [entry.get("logprob") for entry in content])
        text = (choice.get("message") or {}).get("content") or ""
        return self._generation(text, ids, logprobs, choice, sampling)

    def _generation(
        self,
        text: str,
        ids: list[int] | None,
        logprobs: list[float] | None,
        choice: dict[str, Any],
        sampling: SamplingParams,
    ) -> Generation:
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        if ids is None:
            ids, logprobs = self._reencode(text, finish, choice, sampling), None
        return Generation(token_ids=ids, logprobs=logprobs, finish_reason=finish, weight_version=self.weight_version)

    def _reencode(self, text: str, finish: str, choice: dict[str, Any], sampling: SamplingParams) -> list[int]:
        """Approximate ids from text: encode it, then append the id that ended the turn.

        vLLM-style servers say why a turn stopped in ``stop_reason`` (None = EOS, int = stop token,
        str = stop string, which adds no id); without it, EOS is assumed unless the text ends with a
        stop string.
        """
        if self.tokenizer is None:
            raise InferenceError("openai server returned no token ids and no local tokenizer is set: set tokenizer")
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        if finish != "stop":
            return ids
        end_id = getattr(self.tokenizer, "eos_token_id", None)
        if "stop_reason" in choice:
            reason = choice["stop_reason"]
            end_id = reason if isinstance(reason, int) else None if isinstance(reason, str) else end_id
        elif any(text.endswith(stop) for stop in sampling.stop):
            end_id = None
        if end_id is not None and (not ids or ids[-1] != end_id):
            ids.append(end_id)
        return ids
