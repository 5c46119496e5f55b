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
from typing import Any

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
        token = object()
        with self._lock:
            self._open.setdefault(phase, {})[id(token)] = time.monotonic()
        try:
            yield
        finally:
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
        return {f"async/busy_{phase}": s / span for phase, s in self.seconds(start, end).items()}


class MeteredBackend:
    """A generation backend whose calls are timed as ``generation`` and serialized by a lock.

    The lock makes a weight update (:meth:`exclusive`) wait for the running generate call and
    keeps the next one waiting until the update is applied; or the update is staged
    (:meth:`stage`) and the next generate call applies it first. Either way weights change
    BETWEEN requests, and episodes in flight simply continue with the new version. Every other attribute (tokenizer,
    ``weight_version``, ``engines`` ...) is the wrapped backend's.
    """

    def __init__(self, backend: Any, clock: BusyClock) -> None:
        self.inner = backend
        self.clock = clock
        self._lock = threading.Lock()
        self._staged: Callable[[Any], None] | None = None
        self._staged_lock = threading.Lock()
        if "seeds" not in inspect.signature(backend.generate).parameters:
            self.generate = self._generate_plain  # the batcher then never passes per-row seeds

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, prompts: list[list[int]], sampling: Any, seeds: list[int | None] | None = None) -> list[Any]:
        """The wrapped backend's ``generate`` (same arguments and results)."""
        with self._lock, self.clock.busy("generation"):
            self._apply_staged()
            if seeds is None:
                return self.inner.generate(prompts, sampling)
            return self.inner.generate(prompts, sampling, seeds=seeds)

    def _generate_plain(self, prompts: list[list[int]], sampling: Any) -> list[Any]:
        with self._lock, self.clock.busy("generation"):
            self._apply_staged()
            return self.inner.generate(prompts, sampling)

    @contextlib.contextmanager
    def exclusive(self, blocking: bool = True) -> Iterator[Any]:
        """Hold off generate calls for the block (a weight update); yields the wrapped backend, or
        None when ``blocking`` is False and a generate call is running."""
        if not self._lock.acquire(blocking=blocking):
            yield None
            return
        try:
            self._apply_staged(drop=True)  # superseded by what the block applies
            yield self.inner
        finally:
            self._lock.release()

    def stage(self, apply: Callable[[Any], None]) -> None:
        """Have ``apply(backend)`` run before the next generate call (or :meth:`apply_staged`);
        a later stage replaces an unapplied one."""
        with self._staged_lock:
            self._staged = apply

    def apply_staged(self) -> None:
        """Apply a staged update now (waits for a running generate call)."""
        with self._lock:
            self._apply_staged()

    def _apply_staged(self, drop: bool = False) -> None:
        with self._staged_lock:
            apply, self._staged = self._staged, None
        if apply is not None and not drop:
            apply(self.inner)
