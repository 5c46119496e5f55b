"""Several generation engines behind one backend: each request goes to the engine with the fewest
requests in flight (continuous batching, :meth:`EnginePool.submit`), a whole batch is split into
contiguous shares (:meth:`EnginePool.generate`); control calls (weight reload, version) go to
every engine. This is how one rank drives N vLLM servers (SkyRL's remote client and prime-rl do
the same). Which engines a rank reloads is the weight sync's business (``weight_sync/``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from swerl.inference.backends.base import ContinuousBackend, Generation, SamplingParams

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def split_evenly(count: int, parts: int) -> list[range]:
    """``parts`` contiguous ranges covering ``range(count)``; sizes differ by at most one, the
    first ones larger (``split_evenly(5, 2)`` -> [range(0, 3), range(3, 5)])."""
    base, extra = divmod(count, parts)
    bounds, start = [], 0
    for index in range(parts):
        stop = start + base + (1 if index < extra else 0)
        bounds.append(range(start, stop))
        start = stop
    return bounds


class EnginePool(ContinuousBackend):
    """Spread generation over ``engines``; reload and version every one of them.

    Args:
        engines: backends with ``generate(prompts, sampling, seeds=)``, ``reload_weights(dir,
            version, repack_tied)`` and a ``weight_version`` attribute (``VLLMBackend``,
            ``VLLMServerBackend``); :meth:`submit` needs them to be ``ContinuousBackend`` s.
        tokenizer: the policy's tokenizer; on_close: called by :meth:`close` (e.g. stop servers).
    """

    def __init__(self, engines: Sequence[Any], tokenizer: PreTrainedTokenizerBase | None = None, on_close: Callable[[], None] | None = None) -> None:
        if not engines:
            raise ValueError("EnginePool needs at least one engine")
        self.engines = list(engines)
        self.tokenizer = tokenizer
        self._on_close = on_close
        self._threads = ThreadPoolExecutor(max_workers=len(self.engines))
        self._lock = threading.Lock()
        self._in_flight = [0] * len(self.engines)
        self._next = 0  # round-robin among the least loaded
        self.can_pause = all(isinstance(e, ContinuousBackend) and e.can_pause for e in self.engines)

    def pause(self) -> None:
        """Freeze the requests in flight on every engine (``ContinuousBackend.pause``)."""
        for engine in self.engines:
            engine.pause()

    def resume(self) -> None:
        """Every engine steps on (``ContinuousBackend.resume``)."""
        for engine in self.engines:
            engine.resume()

    @property
    def weight_version(self) -> int:
        """The policy version of the pool (all engines hold the same one)."""
        return self.engines[0].weight_version

    @weight_version.setter
    def weight_version(self, version: int) -> None:
        for engine in self.engines:
            engine.weight_version = version

    def generate(
        self, prompts: list[list[int]], sampling: SamplingParams, seeds: list[int | None] | None = None
    ) -> list[Generation]:
        """Engine k samples the k-th contiguous share of ``prompts``; results in prompt order."""
        row_seeds = seeds if seeds is not None else [sampling.seed] * len(prompts)
        shares = [share for share in split_evenly(len(prompts), len(self.engines)) if len(share)]
        futures = [
            self._threads.submit(
                engine.generate, [prompts[i] for i in share], sampling, seeds=[row_seeds[i] for i in share]
            )
            for engine, share in zip(self.engines, shares)
        ]
        return [generation for future in futures for generation in future.result()]

    def submit(self, prompt: list[int], sampling: SamplingParams) -> Future[Generation]:
        """Send one request to the engine with the fewest requests in flight (ties in turn); its future."""
        with self._lock:
            order = [(self._next + k) % len(self.engines) for k in range(len(self.engines))]
            index = min(order, key=lambda i: self._in_flight[i])
            self._in_flight[index] += 1
            self._next = (index + 1) % len(self.engines)
        try:
            future = self.engines[index].submit(prompt, sampling)
        except BaseException:
            self._finished(index)
            raise
        future.add_done_callback(lambda _: self._finished(index))
        return future

    def _finished(self, index: int) -> None:
        with self._lock:
            self._in_flight[index] -= 1

    def reload_weights(self, weights_dir: str, version: int, repack_tied: bool = True) -> None:
        """Every engine reloads ``weights_dir`` (concurrently) and takes ``version``."""
        futures = [self._threads.submit(e.reload_weights, weights_dir, version, repack_tied) for e in self.engines]
        for future in futures:
            future.result()

    def load_adapter(self, name: str, path: str, version: int) -> None:
        """Every engine loads the LoRA adapter folder ``path`` as ``name`` and samples with it (a
        user's adapter for an eval; training syncs go through ``weight_sync.adapter.AdapterSync``)."""
        futures = [self._threads.submit(e.load_adapter, name, path, version) for e in self.engines]
        for future in futures:
            future.result()

    def close(self) -> None:
        """Close every engine, then run ``on_close``."""
        for engine in self.engines:
            close = getattr(engine, "close", None)
            if close is not None:
                close()
        self._threads.shutdown(wait=False)
        if self._on_close is not None:
            self._on_close()
