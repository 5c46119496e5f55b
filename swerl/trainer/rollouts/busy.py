"""Where a step's wall time goes: busy intervals per phase (generation, rollouts, update), and the
generation backend wrapper that records them and serializes requests against weight updates.

The pipeline (``pipeline.py``) reports, per step, the fraction of the step's wall time each phase
was busy (``async/busy_generation``, ``async/busy_sandbox``, ``async/busy_update``; see
``docs/metrics.md``). Intervals are taken on ``time.monotonic()``, from any thread.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any

from swerl import metric_keys
from swerl.inference.backends.base import ContinuousBackend

if TYPE_CHECKING:
    from swerl.inference.backends.base import Generation, GenerationBackend, SamplingParams

Interval = tuple[float, float]


def _merged(intervals: list[Interval], start: float, end: float) -> list[Interval]:
    """The union of ``intervals`` clipped to ``[start, end]``, as sorted disjoint intervals."""
    out: list[list[float]] = []
    for a, b in sorted((max(a, start), min(b, end)) for a, b in intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _length(intervals: list[Interval]) -> float:
    return sum(b - a for a, b in intervals)


def _overlap(xs: list[Interval], ys: list[Interval]) -> float:
    """Seconds covered by both of two sorted disjoint interval lists."""
    total, i, j = 0.0, 0, 0
    while i < len(xs) and j < len(ys):
        lo, hi = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        total += max(0.0, hi - lo)
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


class BusyClock:
    """Thread-safe record of when each phase was busy.

    Phases used by the trainer: ``generation`` (a generate call running), ``rollout`` (a batch of
    episodes being collected: generation, sandboxes and verifiers), ``update`` (optimizer step(s)
    and the weight sync). Intervals older than ``keep_s`` are forgotten.
    """

    def __init__(self, keep_s: float = 3600.0) -> None:
        self.keep_s = keep_s
        self._lock = threading.Lock()
        self._done: dict[str, list[Interval]] = {}
        self._open: dict[str, dict[int, float]] = {}

    @contextlib.contextmanager
    def busy(self, phase: str) -> Iterator[None]:
        """Mark ``phase`` busy for the duration of the block (nested or concurrent use allowed)."""
        token = self.begin(phase)
        try:
            yield
        finally:
            self.end(phase, token)

    def begin(self, phase: str) -> object:
        """Open a busy interval of ``phase`` now (any thread); pass the token to :meth:`end`."""
        token = object()
        with self._lock:
            self._open.setdefault(phase, {})[id(token)] = time.monotonic()
        return token

    def end(self, phase: str, token: object) -> None:
        """Close the interval :meth:`begin` opened (any thread)."""
        now = time.monotonic()
        with self._lock:
            began = self._open[phase].pop(id(token))
            done = self._done.setdefault(phase, [])
            done.append((began, now))
            self._done[phase] = [iv for iv in done if iv[1] >= now - self.keep_s]

    def _union(self, phase: str, start: float, end: float) -> list[Interval]:
        with self._lock:
            intervals = list(self._done.get(phase, [])) + [(t, end) for t in self._open.get(phase, {}).values()]
        return _merged(intervals, start, end)

    def seconds(self, start: float, end: float) -> dict[str, float]:
        """Busy seconds in ``[start, end]``: ``generation``, ``sandbox`` (collecting rollouts with no
        generate call running: container starts, tool calls, verifiers) and ``update``."""
        gen = self._union("generation", start, end)
        rollout = self._union("rollout", start, end)
        return {
            "generation": _length(gen),
            "sandbox": _length(rollout) - _overlap(rollout, gen),
            "update": _length(self._union("update", start, end)),
        }

    def fractions(self, start: float, end: float) -> dict[str, float]:
        """``async/busy_{generation,sandbox,update}``: busy seconds / (end - start)."""
        span = max(end - start, 1e-9)
        return {f"{metric_keys.ASYNC_BUSY_PREFIX}{phase}": s / span for phase, s in self.seconds(start, end).items()}


class _Metered:
    """What both metered fronts share: the wrapped backend, the clock, the request gate and a staged
    update. Many requests may be in flight at once; a weight update (:meth:`exclusive`) waits until
    none is (or freezes them, on an engine that can pause) and holds new ones back until it ends. Every other attribute (tokenizer,
    ``weight_version``, ``engines`` ...) is the wrapped backend's."""

    def __init__(self, backend: GenerationBackend | ContinuousBackend, clock: BusyClock) -> None:
        self.inner = backend
        self.clock = clock
        self._gate = threading.Condition()
        self._in_flight = 0
        self._updating = False
        self._staged: Callable[[Any], None] | None = None
        self._staged_lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @contextlib.contextmanager
    def exclusive(self, blocking: bool = True, pause: bool = False) -> Iterator[Any]:
        """Hold new requests back and wait for those in flight (a weight update); yields the wrapped
        backend, or None when ``blocking`` is False and a request is in flight. A staged update is
        dropped: what the block applies supersedes it.

        With ``pause`` and a backend that can (``ContinuousBackend.can_pause``), the requests in
        flight are not waited for: they are frozen (``pause``) for the block and go on after it
        (``resume``) with the weights it loaded, their tokens so far kept."""
        frozen = pause and isinstance(self.inner, ContinuousBackend) and self.inner.can_pause
        if not self._hold(blocking, drain=not frozen):
            yield None
            return
        try:
            if frozen:
                self.inner.pause()
            try:
                self._apply_staged(drop=True)
                yield self.inner
            finally:
                if frozen:
                    self.inner.resume()
        finally:
            self._release()

    def _hold(self, blocking: bool, drain: bool = True) -> bool:
        """Close the gate, once no request is in flight with ``drain``; False (gate left open) when
        not ``blocking`` and one is."""
        with self._gate:
            if not blocking and (self._in_flight or self._updating):
                return False
            self._gate.wait_for(lambda: not self._updating)
            self._updating = True
            if drain:
                self._gate.wait_for(lambda: self._in_flight == 0)
        return True

    def _release(self) -> None:
        with self._gate:
            self._updating = False
            self._gate.notify_all()

    def stage(self, apply: Callable[[Any], None]) -> None:
        """Have ``apply(backend)`` run before the next request (or :meth:`apply_staged`); a later
        stage replaces an unapplied one."""
        with self._staged_lock:
            self._staged = apply

    def apply_staged(self) -> None:
        """Apply a staged update now, waiting for the requests in flight (no-op when none is staged)."""
        with self._staged_lock:
            staged = self._staged is not None
        if staged and self._hold(True):
            try:
                self._apply_staged()
            finally:
                self._release()

    def _apply_staged(self, drop: bool = False) -> None:
        with self._staged_lock:
            apply, self._staged = self._staged, None
        if apply is not None and not drop:
            apply(self.inner)


class MeteredBackend(_Metered):
    """A batch backend (HF) whose ``generate`` calls are timed as ``generation`` and gated.

    A weight update either waits for the running call (:meth:`exclusive`) or is staged
    (:meth:`stage`) and applied by the next call first. Either way weights change BETWEEN calls,
    and episodes in flight continue with the new version.
    """

    def __init__(self, backend: GenerationBackend, clock: BusyClock) -> None:
        super().__init__(backend, clock)
        if "seeds" not in inspect.signature(backend.generate).parameters:
            self.generate = self._generate_plain  # the batcher then never passes per-row seeds

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        with self._gate:
            self._gate.wait_for(lambda: not self._updating and self._in_flight == 0)
            self._in_flight += 1
        try:
            self._apply_staged()
            yield
        finally:
            with self._gate:
                self._in_flight -= 1
                self._gate.notify_all()

    def generate(self, prompts: list[list[int]], sampling: SamplingParams,
                 seeds: list[int | None] | None = None) -> list[Generation]:
        """The wrapped backend's ``generate`` (same arguments and results), one call at a time."""
        with self._call(), self.clock.busy("generation"):
            if seeds is None:
                return self.inner.generate(prompts, sampling)
            return self.inner.generate(prompts, sampling, seeds=seeds)

    def _generate_plain(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        with self._call(), self.clock.busy("generation"):
            return self.inner.generate(prompts, sampling)


class MeteredStream(_Metered, ContinuousBackend):
    """A continuous backend (vLLM) whose requests are gated and timed: ``generation`` is busy while
    any request is in flight. :meth:`submit` never blocks: a request arriving during a weight update
    is held and sent when the update ends, so the producer's event loop keeps running."""

    def __init__(self, backend: ContinuousBackend, clock: BusyClock) -> None:
        super().__init__(backend, clock)
        self._held: list[tuple[list[int], SamplingParams, Future[Generation]]] = []

    def submit(self, prompt: list[int], sampling: SamplingParams) -> Future[Generation]:
        """The wrapped backend's ``submit``, or held until the weight update in progress ends."""
        outer: Future = Future()
        with self._gate:
            if self._updating:
                self._held.append((prompt, sampling, outer))
                return outer
            self._in_flight += 1
        self._forward(prompt, sampling, outer)
        return outer

    def _forward(self, prompt: list[int], sampling: SamplingParams, outer: Future[Generation]) -> None:
        """Send one admitted request; ``outer`` gets its result, the gate and the clock its end. A
        cancelled ``outer`` (its episode cancelled: Ctrl-C, a stopping run) cancels the request,
        and a result that arrives for it anyway is dropped."""
        token = self.clock.begin("generation")

        def finished(inner: Future) -> None:
            self.clock.end("generation", token)
            with self._gate:
                self._in_flight -= 1
                self._gate.notify_all()
            if inner.cancelled():
                outer.cancel()
                return
            error = inner.exception()
            with contextlib.suppress(InvalidStateError):  # outer cancelled meanwhile: nobody waits
                outer.set_exception(error) if error is not None else outer.set_result(inner.result())

        if outer.cancelled():  # cancelled while held back: never sent
            self.clock.end("generation", token)
            with self._gate:
                self._in_flight -= 1
                self._gate.notify_all()
            return
        try:
            inner = self.inner.submit(prompt, sampling)
        except BaseException as err:  # noqa: BLE001 - the request's own caller gets it
            failed: Future = Future()
            failed.set_exception(err)
            finished(failed)
            return
        inner.add_done_callback(finished)
        outer.add_done_callback(lambda _: inner.cancel())  # a no-op once inner is done

    def _release(self) -> None:
        """Open the gate and send the requests held while it was closed."""
        with self._gate:
            self._updating = False
            held, self._held = self._held, []
            self._in_flight += len(held)
            self._gate.notify_all()
        for prompt, sampling, outer in held:
            self._forward(prompt, sampling, outer)


def metered(backend: GenerationBackend | ContinuousBackend, clock: BusyClock) -> MeteredBackend | MeteredStream:
    """The metered front for ``backend``'s type: :class:`MeteredStream` for a ``ContinuousBackend``."""
    if isinstance(backend, ContinuousBackend):
        return MeteredStream(backend, clock)
    return MeteredBackend(backend, clock)
