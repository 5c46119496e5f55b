"""The timing-driven producer's episode slots, one budget for every batch in flight (continuous
admission, docs/async.md): an episode holds a slot for its whole life (sandbox, agent, verifier,
control run), and when batch s's episodes have all started, the slots its finished episodes free
go to batch s + 1's (once admission control allows s + 1), instead of idling in s's tail.

Also what the budget's occupancy says about a batch: ``rollout/slot_idle_share``, the share of
the producer's slot-seconds that held no episode of any batch between the batch's first start and
its last finish.
"""

from __future__ import annotations

import asyncio
import time


class SlotBudget:
    """``concurrency`` episode slots shared by the batches of one producer (its event loop only).

    Args:
        concurrency: most episodes alive at once, all batches together (>= 1).
    Raises: ValueError when ``concurrency`` < 1.
    """

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency ({concurrency}) must be >= 1")
        self.concurrency = concurrency
        self._semaphore = asyncio.Semaphore(concurrency)
        self._held = 0
        self._slot_s = 0.0  # slot-seconds held up to ``self._since``
        self._since = time.monotonic()

    def batch(self, episodes: int) -> BatchSlots:
        """A batch's view of the budget, entered once by each of its ``episodes`` episodes."""
        return BatchSlots(self, episodes)

    def held_slot_s(self, now: float) -> float:
        """Slot-seconds held from the budget's creation to ``now`` (monotonic seconds, not before
        the last change)."""
        return self._slot_s + self._held * (now - self._since)

    async def _acquire(self) -> float:
        await self._semaphore.acquire()
        return self._change(+1)

    def _release(self) -> float:
        now = self._change(-1)
        self._semaphore.release()
        return now

    def _change(self, delta: int) -> float:
        now = time.monotonic()
        self._slot_s = self.held_slot_s(now)
        self._since, self._held = now, self._held + delta
        return now


class BatchSlots:
    """One batch's episodes on a :class:`SlotBudget`: an async context manager each episode enters
    for its life (``collect_rollouts(slots=...)``).

    Attributes:
        all_started: set once every episode of the batch holds or has held a slot (at once for
            a batch of no episodes): from then on the batch asks for no more slots.
    """

    def __init__(self, budget: SlotBudget, episodes: int) -> None:
        self.budget = budget
        self.episodes = episodes
        self.all_started = asyncio.Event()
        self._started = self._finished = 0
        self._first: tuple[float, float] | None = None  # (monotonic s, budget's held slot-seconds)
        self._last: tuple[float, float] | None = None
        if episodes == 0:
            self.all_started.set()

    async def __aenter__(self) -> BatchSlots:
        now = await self.budget._acquire()
        if self._first is None:
            self._first = (now, self.budget.held_slot_s(now))
        self._started += 1
        if self._started >= self.episodes:
            self.all_started.set()
        return self

    async def __aexit__(self, *exc: object) -> None:
        now = self.budget._release()
        self._finished += 1
        if self._finished >= self.episodes:
            self._last = (now, self.budget.held_slot_s(now))

    def idle_share(self) -> float:
        """Share (0..1) of the budget's slot-seconds that held no episode of any batch between this
        batch's first start and its last finish; 0.0 when the batch took no time or has not ended."""
        if self._first is None or self._last is None:
            return 0.0
        span_s = (self._last[0] - self._first[0]) * self.budget.concurrency
        if span_s <= 0:
            return 0.0
        return max(0.0, 1.0 - (self._last[1] - self._first[1]) / span_s)
