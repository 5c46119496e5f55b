"""Several generation engines behind one backend: each request goes to the engine that served the
turn it continues (its prefix cache holds the episode's tokens) or else to the engine with the
fewest requests in flight (continuous batching, :meth:`EnginePool.submit`), a whole batch is split into
contiguous shares (:meth:`EnginePool.generate`); control calls (weight reload, version) go to
every engine. This is how one rank drives N vLLM servers (SkyRL's remote client and prime-rl do
the same). Which engines a rank reloads is the weight sync's business (``weight_sync/``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
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


_HASH_MOD = (1 << 61) - 1  # a Mersenne prime: the polynomial hash below collides with odds ~n/2^61
_HASH_BASE = 1_000_003


def prefix_hashes(tokens: Sequence[int]) -> Iterator[int]:
    """The polynomial hash of ``tokens[:1]``, ``tokens[:2]``, ... in turn (one pass, O(len))."""
    value = 0
    for token in tokens:
        value = (value * _HASH_BASE + token + 1) % _HASH_MOD
        yield value


class PrefixRoutes:
    """Which engine last served a token sequence, found from a later prompt that extends it.

    A multi-turn episode's next prompt is its last prompt, the reply (as the chat template renders
    it again) and the tool's output; sent to the engine that served the last turn, the engine's
    prefix cache skips re-computing those tokens (up to 32k per turn), which a least-loaded choice
    across servers throws away (SkyRL and verl route an episode's turns to one server too). Keys are
    a served sequence's prefixes at its prompt's end, 16, 32, 64, ... tokens into the reply and at
    its end (a template that re-renders a reply still matches at the prompt or an early mark), so a
    lookup is the longest stored prefix of the new prompt. Only a proper prefix counts: samples of a
    group share their first prompt and are spread by load. A hash collision (odds ~2^-61 per key)
    sends a request to another engine: it costs a prefill, never a different result.

    Args:
        capacity: most keys kept; the oldest are forgotten first.
    """

    def __init__(self, capacity: int = 1 << 16) -> None:
        self.capacity = capacity
        self._engine: OrderedDict[tuple[int, int], int] = OrderedDict()  # (length, hash) -> engine index
        self._lock = threading.Lock()  # the hashing runs outside it

    def remember(self, prompt: Sequence[int], reply: Sequence[int], engine: int) -> None:
        """``engine`` now caches ``prompt + reply``: key it at the prompt's end, the reply's marks and its end."""
        marks = {len(prompt), len(prompt) + len(reply)}
        mark = 16
        while mark < len(reply):
            marks.add(len(prompt) + mark)
            mark *= 2
        keys = [(n, value) for n, value in enumerate(prefix_hashes([*prompt, *reply]), start=1) if n in marks]
        with self._lock:
            for key in keys:
                self._engine[key] = engine
                self._engine.move_to_end(key)
            while len(self._engine) > self.capacity:
                self._engine.popitem(last=False)

    def lookup(self, prompt: Sequence[int]) -> int | None:
        """The engine that served the longest remembered proper prefix of ``prompt``, or None."""
        keys = list(enumerate(prefix_hashes(prompt[:-1]), start=1))
        with self._lock:
            found = [self._engine[key] for key in keys if key in self._engine]
        return found[-1] if found else None


class EnginePool(ContinuousBackend):
    """Spread generation over ``engines``; reload and version every one of them.

    A request that continues an earlier one (:class:`PrefixRoutes`) goes back to that engine unless
    it is overloaded: it has more than twice the least-loaded engine's requests in flight plus 4.
    ``routed`` counts the choices (``affinity``, ``least_loaded``, ``overloaded``: an affinity given
    up for load).

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
        self._routes = PrefixRoutes()
        self.routed = {"affinity": 0, "least_loaded": 0, "overloaded": 0}
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
        """Send one request to the engine that served the turn it continues, else to the one with
        the fewest requests in flight (ties in turn); its future."""
        sticky = self._routes.lookup(prompt) if len(self.engines) > 1 else None
        with self._lock:
            index = self._route(sticky)
            self._in_flight[index] += 1
        try:
            future = self.engines[index].submit(prompt, sampling)
        except BaseException:
            self._finished(index)
            raise
        future.add_done_callback(lambda done: self._finished(index, prompt, done))
        return future

    def _route(self, sticky: int | None) -> int:
        """The engine for a request (under the lock): ``sticky`` (the engine of the turn it continues)
        within the load bound, else the least loaded."""
        least = min(self._in_flight)
        if sticky is not None and self._in_flight[sticky] <= 2 * least + 4:
            self.routed["affinity"] += 1
            return sticky
        self.routed["overloaded" if sticky is not None else "least_loaded"] += 1
        order = [(self._next + k) % len(self.engines) for k in range(len(self.engines))]
        index = min(order, key=lambda i: self._in_flight[i])
        self._next = (index + 1) % len(self.engines)
        return index

    def _finished(self, index: int, prompt: list[int] | None = None, done: Future[Generation] | None = None) -> None:
        """One request fewer on engine ``index``; a served request's tokens are remembered for its next turn."""
        with self._lock:
            self._in_flight[index] -= 1
        served = done is not None and not done.cancelled() and done.exception() is None
        if prompt is not None and served and len(self.engines) > 1:
            self._routes.remember(prompt, done.result().token_ids, index)

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
