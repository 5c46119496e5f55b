"""Async fronts of a backend for concurrent episodes (many on one asyncio loop, each awaiting one
turn at a time):

- :class:`RequestStream` for a ``ContinuousBackend`` (vLLM in process or servers): every request
  goes to the engine the moment its episode asks, and comes back when it finishes; the engine
  batches what is in flight. No batch barrier.
- :class:`AsyncBatcher` for a batch backend (HF ``generate``): it queues requests, groups the
  ones with equal sampling settings (seeds may differ when the backend takes per-row seeds), and
  runs one batch at a time in a worker thread (``asyncio.to_thread``) so the event loop never
  stalls while the model computes. A failing batch raises in its own callers only.

``make_front`` picks the one for the backend's type.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from dataclasses import dataclass, field

from swerl.errors import InferenceError
from swerl.inference.backends.base import ContinuousBackend, Generation, GenerationBackend, SamplingParams

log = logging.getLogger(__name__)


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future[Generation]
    enqueued_at: float = field(default=0.0)


class AsyncBatcher:
    """Collects concurrent ``generate`` requests into batches for one backend.

    Args:
        backend: any ``GenerationBackend``; if its ``generate`` accepts ``seeds=`` (HF, vLLM),
            requests that differ only by seed share a batch.
        max_batch_size: most prompts per backend call.
        max_wait_s: how long the oldest request waits for companions before its batch runs
            (seconds); a full batch runs at once.

    Attributes:
        batch_sizes: sizes of the most recent batches run (newest last; up to 1000 kept).
    """

    def __init__(self, backend: GenerationBackend, max_batch_size: int = 8, max_wait_s: float = 0.05) -> None:
        if max_batch_size < 1 or max_wait_s < 0:
            raise ValueError("AsyncBatcher needs max_batch_size >= 1 and max_wait_s >= 0")
        self.backend = backend
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.batch_sizes: deque[int] = deque(maxlen=1000)
        self._row_seeds = "seeds" in inspect.signature(backend.generate).parameters
        self._pending: dict[str, list[_Request]] = {}
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._in_flight: list[_Request] = []
        self._closed = False

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        """Sample one continuation of ``prompt_ids`` (token ids) as part of some batch.

        Raises:
            InferenceError: the batcher is closed, or re-raised from the backend for this batch.
        """
        if self._closed:
            raise InferenceError("AsyncBatcher.generate called after close()")
        loop = asyncio.get_running_loop()
        if self._worker is not None and (self._worker.done() or self._worker.get_loop() is not loop):
            # A previous asyncio.run() ended: its requests died with it; serve this loop afresh.
            self._worker, self._in_flight = None, []
            self._pending.clear()
        if self._worker is None:
            self._wakeup = asyncio.Event()
            self._worker = loop.create_task(self._run(), name="swerl-inference-batcher")
        request = _Request(list(prompt_ids), sampling, loop.create_future(), loop.time())
        self._pending.setdefault(self._key(sampling), []).append(request)
        assert self._wakeup is not None
        self._wakeup.set()
        return await request.future

    async def close(self) -> None:
        """Stop the worker; requests still queued fail with ``InferenceError``. Idempotent."""
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        self._fail_outstanding("AsyncBatcher closed before this request finished")

    def _fail_outstanding(self, message: str) -> None:
        """Fail every queued and in-flight request (close, or a crashed worker)."""
        requests = [request for queue in self._pending.values() for request in queue] + self._in_flight
        for request in requests:
            if not request.future.done():
                request.future.set_exception(InferenceError(message))
        self._pending.clear()
        self._in_flight = []

    async def __aenter__(self) -> AsyncBatcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _key(self, sampling: SamplingParams) -> str:
        """Requests with equal keys may share a batch."""
        if self._row_seeds:
            return sampling.model_copy(update={"seed": None}).model_dump_json()
        return sampling.model_dump_json()

    async def _run(self) -> None:
        """Worker: repeatedly take the oldest queue, wait for companions until full or due, run it."""
        try:
            await self._serve()
        except Exception as err:
            log.exception("inference batcher worker crashed")
            self._fail_outstanding(f"inference batcher worker crashed: {err}")
            self._worker = None  # the next request starts a fresh worker
            raise

    async def _serve(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                key = min(self._pending, key=lambda k: self._pending[k][0].enqueued_at)
                queue = self._pending[key]
                deadline = queue[0].enqueued_at + self.max_wait_s
                while len(queue) < self.max_batch_size and (remaining := deadline - loop.time()) > 0:
                    self._wakeup.clear()
                    try:
                        await asyncio.wait_for(self._wakeup.wait(), remaining)
                    except TimeoutError:
                        break
                batch = queue[: self.max_batch_size]
                del queue[: self.max_batch_size]
                if not queue:
                    del self._pending[key]
                live = [request for request in batch if not request.future.done()]
                if live:
                    await self._run_batch(live)

    async def _run_batch(self, batch: list[_Request]) -> None:
        """Run one backend call in a thread and resolve each caller's future."""
        prompts = [request.prompt_ids for request in batch]
        sampling = batch[0].sampling
        seeds = [request.sampling.seed for request in batch]
        self.batch_sizes.append(len(batch))
        self._in_flight = batch
        try:
            if self._row_seeds and len(set(seeds)) > 1:
                call_sampling = sampling.model_copy(update={"seed": None})
                results = await asyncio.to_thread(self.backend.generate, prompts, call_sampling, seeds=seeds)
            else:
                results = await asyncio.to_thread(self.backend.generate, prompts, sampling)
            if len(results) != len(batch):
                raise InferenceError(f"backend returned {len(results)} generations for {len(batch)} prompts")
        except Exception as err:  # noqa: BLE001 - delivered to this batch's callers, not swallowed
            log.warning("generation batch of %d failed: %s", len(batch), err)
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(err)
            self._in_flight = []
            return
        for request, result in zip(batch, results, strict=True):
            if not request.future.done():
                request.future.set_result(result)
        self._in_flight = []


class RequestStream:
    """Async front of a ``ContinuousBackend``: each ``generate`` is one request submitted at once.

    Args:
        backend: the engine(s); they schedule what is in flight themselves.

    Attributes:
        in_flight: requests submitted and not finished (for tests and the bench).
        max_in_flight: the most requests in flight at once so far.
    """

    def __init__(self, backend: ContinuousBackend) -> None:
        self.backend = backend
        self.in_flight = 0
        self.max_in_flight = 0
        self._closed = False

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        """Sample one continuation of ``prompt_ids`` (token ids).

        Raises:
            InferenceError: the stream is closed, or from the backend for this request.
        """
        if self._closed:
            raise InferenceError("RequestStream.generate called after close()")
        future = self.backend.submit(list(prompt_ids), sampling)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await asyncio.wrap_future(future)
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        """Refuse new requests (those in flight finish in the engine). Idempotent."""
        self._closed = True

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def make_front(backend: GenerationBackend, max_batch_size: int, max_wait_s: float) -> RequestStream | AsyncBatcher:
    """The async front for ``backend``'s type: a :class:`RequestStream` for a ``ContinuousBackend``,
    else an :class:`AsyncBatcher` of up to ``max_batch_size`` prompts waiting ``max_wait_s`` seconds."""
    if isinstance(backend, ContinuousBackend):
        return RequestStream(backend)
    return AsyncBatcher(backend, max_batch_size=max_batch_size, max_wait_s=max_wait_s)
