"""Continuous batching for the in-process vLLM engine: requests enter the engine the moment they
are submitted and each one's future resolves when IT finishes, while the engine steps every
request in flight together (``LLMEngine.add_request`` + ``LLMEngine.step``, the loop ``LLM.generate``
runs inside, opened up). ``LLM.generate`` would instead return only when the longest request of
its batch ends, and a request arriving meanwhile would wait for the whole batch.

The loop runs on the engine's owner thread (``engine_thread.py``) while any request is queued or
in flight, then returns, so that control calls queued on that thread (weight reload, sleep, close)
run only once the engine is idle: the weight sync drains by holding new requests back
(``trainer/rollouts/busy.py``) and waiting for the loop to end.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from swerl.errors import InferenceError
from swerl.inference.backends.base import Generation
from swerl.inference.engines.engine_thread import EngineThread
from swerl.logs import phase

log = logging.getLogger(__name__)


class RequestPump:
    """Feeds one in-process ``LLMEngine`` request by request and steps it until it is idle.

    Args:
        thread: the engine's owner thread. engine: returns the ``LLMEngine`` (``llm.llm_engine``).
        convert: a finished ``RequestOutput`` -> :class:`Generation` (raises ``InferenceError``).

    Attributes:
        retired: why the engine is unusable (a step failed with requests left in it), else None.
    """

    def __init__(self, thread: EngineThread, engine: Callable[[], Any],
                 convert: Callable[[Any], Generation]) -> None:
        self._thread, self._engine, self._convert = thread, engine, convert
        self._lock = threading.Lock()
        self._queued: list[tuple[str, Any, Any, Any, Future[Generation]]] = []
        self._in_flight: dict[str, Future[Generation]] = {}
        self._running = False
        self._stopping = False
        self._ids = itertools.count()
        self.retired: str | None = None

    def submit(self, prompt: Any, params: Any, lora_request: Any = None) -> Future[Generation]:
        """Queue one request (a ``TokensPrompt``, its ``vllm.SamplingParams`` and the ``LoRARequest``
        of the adapter it samples with, None = the base); its future."""
        future: Future[Generation] = Future()
        with self._lock:
            if self.retired is not None or self._stopping:
                why = self.retired or "the engine is closing"
                future.set_exception(InferenceError(f"the vLLM engine takes no more requests ({why})"))
                return future
            self._queued.append((f"swerl-{next(self._ids)}", prompt, params, lora_request, future))
            start, self._running = not self._running, True
        if start:
            self._thread.submit(self._run)
        return future

    def stop(self) -> None:
        """Abort what is queued or in flight (their futures raise) and take no more requests."""
        with self._lock:
            self._stopping = True

    def _run(self) -> None:
        """The loop (owner thread): add new requests, step, resolve finished ones; ends when idle."""
        engine = self._engine()
        done = 0
        with phase("vLLM generate (continuous)", unit="requests done") as clock:
            while True:
                with self._lock:
                    queued, self._queued = self._queued, []
                    if self._stopping:
                        self._abort(engine, queued, "the engine was closed")
                        self._running = False
                        return
                    if not queued and not self._in_flight:
                        self._running = False
                        return
                for request_id, prompt, params, lora_request, future in queued:
                    self._add(engine, request_id, prompt, params, lora_request, future)
                try:
                    finished = [out for out in engine.step() if out.finished]
                except Exception as err:  # noqa: BLE001 - every waiting caller gets it
                    self._fail(engine, err)
                    return
                for output in finished:
                    self._resolve(output)
                done += len(finished)
                clock.advance(done)

    def _add(self, engine: Any, request_id: str, prompt: Any, params: Any, lora_request: Any,
             future: Future[Generation]) -> None:
        """Add one request; one vLLM refuses (e.g. a prompt past ``max_model_len``) fails alone."""
        try:
            engine.add_request(request_id, prompt, params, lora_request=lora_request)
        except Exception as err:  # noqa: BLE001 - delivered to this request's caller
            future.set_exception(err)
            return
        self._in_flight[request_id] = future

    def _resolve(self, output: Any) -> None:
        future = self._in_flight.pop(output.request_id, None)
        if future is None:
            return
        try:
            future.set_result(self._convert(output))
        except Exception as err:  # noqa: BLE001 - an unusable output fails its own request only
            future.set_exception(err)

    def _fail(self, engine: Any, err: Exception) -> None:
        """A failed step: fail every request; retire the engine when requests stay inside it (every
        later step would wait for them forever)."""
        with self._lock:
            if engine.has_unfinished_requests():
                self.retired = f"{type(err).__name__}: {str(err).strip()[:200]}"
                log.error("vLLM step failed with requests left in the engine; retiring it: %s", self.retired)
            queued, self._queued = self._queued, []
            self._abort(engine, queued, f"vLLM step failed: {type(err).__name__}: {err}", abort=False)
            self._running = False

    def _abort(self, engine: Any, queued: list, why: str, abort: bool = True) -> None:
        """Fail ``queued`` and every request in flight (aborting them in the engine when ``abort``)."""
        if abort and self._in_flight:
            engine.abort_request(list(self._in_flight))
        for future in [*self._in_flight.values(), *(entry[-1] for entry in queued)]:
            if not future.done():
                future.set_exception(InferenceError(why))
        self._in_flight.clear()
