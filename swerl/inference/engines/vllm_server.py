"""vLLM OpenAI servers as generation engines: talk to them token-in / token-out, reload their
weights, stop them (``server_process.py`` starts them).

Data requests go to ``POST /v1/completions`` with the prompt as token ids, ``return_token_ids``
and ``logprobs: 0`` (the sampled token's processed log-prob), one request per prompt with its own
seed; the server batches concurrent requests itself. Control goes to the dev routes
(``VLLM_SERVER_DEV_MODE=1``): ``POST /collective_rpc`` runs swerl's worker extension
(``swerl.inference.engines.vllm_worker``) and ``POST /reset_prefix_cache`` drops KV blocks of old weights.
A server the user starts must have the same flags (``server_process.server_command`` prints them).
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any

import requests
import requests.adapters

from swerl.errors import EnvironmentProblem, InferenceError
from swerl.inference.backends.base import ContinuousBackend, Generation, SamplingParams
from swerl.inference.engines.server_process import SERVED_NAME
from swerl.logs import phase

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

RELOAD_ROUTES = ("/collective_rpc", "/reset_prefix_cache")
"""Dev routes a disk reload drives (``VLLM_SERVER_DEV_MODE=1``)."""
ADAPTER_ROUTES = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")
"""Routes an adapter sync drives (``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``)."""


def completion_request(prompt: list[int], sampling: SamplingParams, seed: int | None,
                       model: str = SERVED_NAME) -> dict[str, Any]:
    """Body of ``POST /v1/completions``: token ids in, token ids and the sampled log-prob out; every
    sampling field explicit (penalties and min_p off, so mu is temperature + top-k + top-p only).
    ``model`` is the served base or a loaded LoRA adapter's name."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(prompt),
        "max_tokens": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "min_p": 0.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "repetition_penalty": 1.0,
        "stop": list(sampling.stop),
        "stop_token_ids": list(sampling.stop_token_ids),
        "logprobs": 0,
        "return_token_ids": True,
        "skip_special_tokens": False,
        "ignore_eos": False,
    }
    if seed is not None:
        body["seed"] = seed
    return body


def generation_from_choice(choice: dict[str, Any], weight_version: int) -> Generation:
    """One ``choices[0]`` of a completion response -> :class:`Generation`.

    Raises:
        InferenceError: token ids or log-probs missing, of different lengths or non-finite, or an
            unknown finish reason.
    """
    ids = choice.get("token_ids")
    values = (choice.get("logprobs") or {}).get("token_logprobs")
    if ids is None or values is None or len(ids) != len(values):
        raise InferenceError(
            "vLLM server returned no token_ids/token_logprobs of equal length; is it a vLLM server (return_token_ids)?"
        )
    if not all(value is not None and math.isfinite(value) for value in values):
        raise InferenceError(f"vLLM server returned a non-finite log-prob: {values}")
    finish = choice.get("finish_reason")
    if finish not in ("stop", "length"):
        raise InferenceError(f"vLLM server request finished with reason {finish!r}")
    return Generation(
        token_ids=[int(i) for i in ids], logprobs=[float(v) for v in values], finish_reason=finish,
        weight_version=weight_version,
    )


class VLLMServerBackend(ContinuousBackend):
    """A generation backend over one vLLM server (started by swerl or named by URL): every request
    is sent as it comes (:meth:`submit`), the server batches those in flight.

    Args:
        url: server root, e.g. ``http://127.0.0.1:8000`` (no ``/v1``).
        tokenizer: the policy's tokenizer (chat templates; the server itself needs no text).
        max_concurrency: requests in flight (the server batches them; keep >= its max_num_seqs).
        timeout_s: per-request timeout, seconds.

    Attributes:
        weight_version: version of the weights the server holds (settable, e.g. on resume).
        adapter: the name of the LoRA adapter requests sample with (None: the base).
    """

    def __init__(self, url: str, tokenizer: PreTrainedTokenizerBase | None = None, max_concurrency: int = 64, timeout_s: float = 600.0) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        self.tokenizer = tokenizer
        self.weight_version = 0
        self.adapter: str | None = None
        self.timeout_s = timeout_s
        self._session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=max_concurrency)
        self._session.mount("http://", adapter)
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency)

    def generate(
        self, prompts: list[list[int]], sampling: SamplingParams, seeds: list[int | None] | None = None
    ) -> list[Generation]:
        """Sample one continuation per prompt, concurrently; same order as ``prompts``. A phase
        (``vLLM generate URL: 3/8 requests done, 12 s``) counts the requests answered."""
        row_seeds = seeds if seeds is not None else [sampling.seed] * len(prompts)
        bodies = [completion_request(p, sampling, s, self.adapter or SERVED_NAME)
                  for p, s in zip(prompts, row_seeds, strict=True)]
        version = self.weight_version
        choices: list[dict[str, Any]] = [{} for _ in bodies]
        with phase(f"vLLM generate {self.url}", total=len(bodies), unit="requests") as clock:
            futures = {self._pool.submit(self.post, "v1/completions", body): i for i, body in enumerate(bodies)}
            for future in as_completed(futures):
                choices[futures[future]] = future.result()["choices"][0]
                clock.advance()
        return [generation_from_choice(choice, version) for choice in choices]

    def submit(self, prompt: list[int], sampling: SamplingParams) -> Future[Generation]:
        """Send one request now (the server batches what is in flight); its future. The generation
        carries the version the server held when it was sent (weight syncs drain requests first)."""
        body = completion_request(prompt, sampling, sampling.seed, self.adapter or SERVED_NAME)
        version = self.weight_version
        return self._pool.submit(lambda: generation_from_choice(self.post("v1/completions", body)["choices"][0],
                                                                version))

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """``POST url/path`` with a JSON body; the JSON answer ({} when empty).

        Raises:
            InferenceError: connection failure or a non-200 answer (status and text quoted).
        """
        url = f"{self.url}/{path}"
        try:
            response = self._session.post(url, json=body or {}, timeout=self.timeout_s)
        except requests.RequestException as err:
            raise InferenceError(f"vLLM server: POST {url} failed: {err.__class__.__name__}: {err}") from err
        if response.status_code != 200:
            raise InferenceError(f"vLLM server: POST {url} -> HTTP {response.status_code}: {response.text[:300]}")
        if not response.content:
            return {}
        try:
            return response.json()
        except ValueError:  # the adapter routes answer plain text ("Success: ...")
            return {"text": response.text}

    def collective_rpc(self, method: str, **kwargs: object) -> list[Any]:
        """Run a worker(-extension) method on every worker of the server; its results."""
        return self.post("collective_rpc", {"method": method, "kwargs": kwargs}).get("results", [])

    def init_worker(self) -> None:
        """One-time worker setup after start: AMX tiles on CPU (bf16 SIGILL otherwise)."""
        self.collective_rpc("swerl_init_amx")

    def routes(self) -> set[str]:
        """The paths the server serves (its ``GET /openapi.json``), e.g. ``/collective_rpc``.

        Raises:
            InferenceError: the server does not answer.
        """
        try:
            response = self._session.get(f"{self.url}/openapi.json", timeout=self.timeout_s)
            response.raise_for_status()
        except requests.RequestException as err:
            raise InferenceError(f"vLLM server: GET {self.url}/openapi.json failed: {err}") from err
        return set(response.json().get("paths", {}))

    def require_routes(self, needed: tuple[str, ...], purpose: str) -> None:
        """Raise unless the server serves every path of ``needed`` (checked once, at start).

        Raises:
            EnvironmentProblem: the first missing route, what needs it, and the fix.
        """
        missing = [path for path in needed if path not in self.routes()]
        if missing:
            raise EnvironmentProblem(
                f"vLLM server {self.url} has no {missing[0]} route, which {purpose} needs; fix: start it with "
                "VLLM_SERVER_DEV_MODE=1 and swerl's flags (swerl.inference.engines.server_process.server_command), on a vLLM "
                "version that has the route"
            )

    def check_reload_api(self) -> None:
        """The routes a disk reload drives exist (dev mode on)."""
        self.require_routes(RELOAD_ROUTES, "generator.weight_sync=disk")

    def worker_count(self) -> int:
        """Workers of the server's model (tensor x pipeline parallel size; ``GET /get_world_size``)."""
        try:
            response = self._session.get(f"{self.url}/get_world_size", params={"include_dp": "false"},
                                         timeout=self.timeout_s)
            response.raise_for_status()
        except requests.RequestException as err:
            raise InferenceError(f"vLLM server: GET {self.url}/get_world_size failed: {err}") from err
        return int(response.json()["world_size"])

    can_pause = True

    def pause(self) -> None:
        """``POST /pause?mode=keep`` (vLLM >= 0.32): requests in flight freeze with their tokens,
        new ones wait in the server's queue until :meth:`resume`.

        Raises:
            InferenceError: the server refused (an older vLLM without the route: HTTP 404).
        """
        self._post_query("pause", {"mode": "keep"})

    def resume(self) -> None:
        """``POST /resume``: frozen and queued requests go on, with the weights loaded meanwhile."""
        self._post_query("resume", {})

    def _post_query(self, path: str, params: dict[str, str]) -> None:
        url = f"{self.url}/{path}"
        try:
            response = self._session.post(url, params=params, timeout=self.timeout_s)
        except requests.RequestException as err:
            raise InferenceError(f"vLLM server: POST {url} failed: {err.__class__.__name__}: {err}") from err
        if response.status_code != 200:
            raise InferenceError(f"vLLM server: POST {url} -> HTTP {response.status_code}: {response.text[:300]} "
                                 "(pausing requests needs vLLM 0.32 or newer)")

    def reset_prefix_cache(self, attempts: int = 5, wait_s: float = 0.1) -> None:
        """Drop every prefix-cache block (computed with old weights); retried while blocks are held.
        Requests frozen by :meth:`pause` are preempted: they keep their tokens and recompute their
        KV with the new weights when they resume.

        Raises:
            InferenceError: the server still answered ``{"success": false}`` after ``attempts`` tries
                (requests running: a sync that did not drain them).
        """
        for attempt in range(attempts):
            answer = self.post("reset_prefix_cache?reset_running_requests=true")
            if answer.get("success", True):  # older vLLMs answer 200 with no body
                return
            time.sleep(wait_s * (attempt + 1))
        raise InferenceError(f"vLLM server {self.url} refused to reset its prefix cache {attempts} times (requests "
                             "still running?); the new weights would reuse KV blocks of the old ones")

    def check_adapter_api(self) -> None:
        """The runtime adapter routes exist (``--enable-lora`` with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``)."""
        self.require_routes(ADAPTER_ROUTES, "model.lora (runtime adapter loading)")

    def load_adapter(self, name: str, path: str, version: int) -> None:
        """Load the peft adapter folder ``path`` (a path the server can read) as adapter ``name``
        (``POST /v1/load_lora_adapter``), sample every later request with it, then unload the previous one.

        Raises:
            InferenceError: the server refused the adapter (status and text quoted).
        """
        self.post("v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        previous = self.adapter
        self.use_adapter(name, version)
        if previous is not None and previous != name:
            self.post("v1/unload_lora_adapter", {"lora_name": previous})

    def unload_adapter(self) -> None:
        """Drop the adapter this client samples with (``POST /v1/unload_lora_adapter``): later requests use the base."""
        if self.adapter is not None:
            name, self.adapter = self.adapter, None
            self.post("v1/unload_lora_adapter", {"lora_name": name})

    def use_adapter(self, name: str, version: int) -> None:
        """Sample with adapter ``name``, which another rank loaded, as ``version`` (shared servers)."""
        self.adapter, self.weight_version = name, version

    def reload_weights(self, weights_dir: str, version: int, repack_tied: bool = True) -> None:
        """Reload the safetensors folder (a path the server can read), re-pack tied heads, reset the
        prefix cache (checked), and set ``weight_version``."""
        self.collective_rpc("swerl_reload_weights", weights_path=str(weights_dir), repack_tied=repack_tied)
        self.reset_prefix_cache()
        self.weight_version = version

    def close(self) -> None:
        """Close the HTTP session and request threads (the server keeps running)."""
        self._pool.shutdown(wait=False)
        self._session.close()
