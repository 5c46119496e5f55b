"""Continuous batching for the in-process vLLM engine: requests enter the engine the moment they
are submitted and each one's future resolves when IT finishes, while the engine steps every
request in flight together (``LLMEngine.add_request`` + ``LLMEngine.step``, the loop ``LLM.generate``
runs inside, opened up). ``LLM.generate`` would instead return only when the longest request of
its batch ends, and a request arriving meanwhile would wait for the whole batch.

The loop runs on the engine's owner thread (``engine_thread.py``) while any request is queued or
in flight, then returns, so that control calls queued on that thread (weight reload, sleep, close)
run only once the engine is idle, or once :meth:`RequestPump.pause` stops the loop between two
steps with requests left inside the engine (the in-process form of vLLM's
``pause_generation(mode="keep")``): a weight reload then runs between two ``step()`` calls, and
:meth:`RequestPump.resume` steps the frozen requests on with the new weights.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING

from swerl.errors import InferenceError
from swerl.inference.backends.base import Generation
from swerl.inference.engines.engine_thread import EngineThread
from swerl.logs import phase

if TYPE_CHECKING:
    from vllm import LLMEngine, RequestOutput, TokensPrompt
    from vllm import SamplingParams as VllmSamplingParams
    from vllm.lora.request import LoRARequest

log = logging.getLogger(__name__)


class RequestPump:
    """Feeds one in-process ``LLMEngine`` request by request and steps it until it is idle.

    Args:
        thread: the engine's owner thread. engine: returns the ``LLMEngine`` (``llm.llm_engine``).
        convert: a finished ``RequestOutput`` and the weight version the request was submitted
            under (its oldest) -> :class:`Generation` (raises ``InferenceError``).

    Attributes:
        retired: why the engine is unusable (a step failed with requests left in it), else None.
    """

    def __init__(self, thread: EngineThread, engine: Callable[[], LLMEngine],
                 convert: Callable[[RequestOutput, int], Generation]) -> None:
        self._thread, self._engine, self._convert = thread, engine, convert
        self._lock = threading.Lock()
        self._queued: list[tuple[str, TokensPrompt, VllmSamplingParams, LoRARequest | None, Future[Generation],
                                 int]] = []
        self._in_flight: dict[str, tuple[Future[Generation], int]] = {}
        self._running = False
        self._paused = False
        self._stopping = False
        self._ids = itertools.count()
        self.retired: str | None = None

    def submit(self, prompt: TokensPrompt, params: VllmSamplingParams, lora_request: LoRARequest | None = None,
               version: int = 0) -> Future[Generation]:
        """Queue one request (a ``TokensPrompt``, its ``vllm.SamplingParams``, the ``LoRARequest``
        of the adapter it samples with, None = the base, and the weight version it starts under);
        its future."""
        future: Future[Generation] = Future()
        with self._lock:
            if self.retired is not None or self._stopping:
                why = self.retired or "the engine is closing"
                future.set_exception(InferenceError(f"the vLLM engine takes no more requests ({why})"))
                return future
            self._queued.append((f"swerl-{next(self._ids)}", prompt, params, lora_request, future, version))
            start = not self._running and not self._paused
            self._running = self._running or start
        if start:
            self._thread.submit(self._run)
        return future

    def pause(self) -> None:
        """Stop stepping after the current step, leaving the requests in flight inside the engine
        (and new ones queued): calls queued on the owner thread after this one run with them frozen."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        """Step again: frozen requests continue and queued ones enter."""
        with self._lock:
            self._paused = False
            start = not self._running and bool(self._queued or self._in_flight)
            self._running = self._running or start
        if start:
            self._thread.submit(self._run)

    @property
    def num_in_flight(self) -> int:
        """Requests inside the engine (frozen ones included)."""
        with self._lock:
            return len(self._in_flight)

    def stop(self) -> None:
        """Abort what is queued or in flight (their futures raise) and take no more requests."""
        with self._lock:
            self._stopping, self._paused = True, False
            start = not self._running and bool(self._queued or self._in_flight)  # paused: nothing steps them
            self._running = self._running or start
        if start:
            self._thread.submit(self._run)

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
                    if self._paused or (not queued and not self._in_flight):
                        self._queued = queued + self._queued  # paused: they enter on resume
                        self._running = False
                        return
                for request_id, prompt, params, lora_request, future, version in queued:
                    if not future.cancelled():
                        self._add(engine, request_id, prompt, params, lora_request, future, version)
                self._drop_cancelled(engine)
                try:
                    finished = [out for out in engine.step() if out.finished]
                except Exception as err:  # noqa: BLE001 - every waiting caller gets it
                    self._fail(engine, err)
                    return
                for output in finished:
                    self._resolve(output)
                done += len(finished)
                clock.advance(done)

    def _add(self, engine: LLMEngine, request_id: str, prompt: TokensPrompt, params: VllmSamplingParams,
             lora_request: LoRARequest | None, future: Future[Generation], version: int) -> None:
        """Add one request; one vLLM refuses (e.g. a prompt past ``max_model_len``) fails alone."""
        try:
            engine.add_request(request_id, prompt, params, lora_request=lora_request)
        except Exception as err:  # noqa: BLE001 - delivered to this request's caller
            future.set_exception(err)
            return
        self._in_flight[request_id] = (future, version)

    def _drop_cancelled(self, engine: LLMEngine) -> None:
        """Abort the requests whose caller cancelled its future (a stopping run's episodes)."""
        cancelled = [request_id for request_id, (future, _) in self._in_flight.items() if future.cancelled()]
        if cancelled:
            engine.abort_request(cancelled)
            for request_id in cancelled:
                del self._in_flight[request_id]

    def _resolve(self, output: RequestOutput) -> None:
        entry = self._in_flight.pop(output.request_id, None)
        if entry is None or entry[0].cancelled():
            return
        future, version = entry
        try:
            result = self._convert(output, version)
        except Exception as err:  # noqa: BLE001 - an unusable output fails its own request only
            with contextlib.suppress(InvalidStateError):  # cancelled by its caller meanwhile
                future.set_exception(err)
            return
        with contextlib.suppress(InvalidStateError):
            future.set_result(result)

    def _fail(self, engine: LLMEngine, err: Exception) -> None:
        """A failed step: fail every request; retire the engine when requests stay inside it (every
        later step would wait for them forever)."""
        with self._lock:
            if engine.has_unfinished_requests():
                self.retired = f"{type(err).__name__}: {str(err).strip()[:200]}"
                log.error("vLLM step failed with requests left in the engine; retiring it: %s", self.retired)
            queued, self._queued = self._queued, []
            self._abort(engine, queued, f"vLLM step failed: {type(err).__name__}: {err}", abort=False)
            self._running = False

    def _abort(self, engine: LLMEngine, queued: list, why: str, abort: bool = True) -> None:
        """Fail ``queued`` and every request in flight (aborting them in the engine when ``abort``)."""
        if abort and self._in_flight:
            engine.abort_request(list(self._in_flight))
        for future in [*(entry[0] for entry in self._in_flight.values()), *(entry[4] for entry in queued)]:
            if not future.done():
                with contextlib.suppress(InvalidStateError):  # cancelled by its caller meanwhile
                    future.set_exception(InferenceError(why))
        self._in_flight.clear()
