"""The pace of container creates on one engine (``sandbox.engines[].max_creates_per_s``).

A step's start asks for hundreds of containers at once; an engine (or a provider with a
per-minute cap) that gets them in one burst slows every call or refuses some. Each engine's
creates (a trial's own and the warm pool's refills) take turns spaced ``1 / rate`` seconds apart
(the generic cell rate algorithm with no burst), so a ramp of N containers takes about N / rate
seconds and the warm pool (``engines[].warm``) covers its first containers.
"""

from __future__ import annotations

import asyncio
import time


class CreatePace:
    """Turns to create a container on one engine, at most ``rate_per_s`` a second.

    Args:
        rate_per_s: creates a second on this engine; None = no limit.
    """

    def __init__(self, rate_per_s: float | None) -> None:
        self.interval_s = 1.0 / rate_per_s if rate_per_s else 0.0
        self._next = 0.0  # monotonic time of the next free turn
        self.waited_s = 0.0  # total seconds creates waited for their turn

    async def turn(self) -> None:
        """Wait for this create's turn (FIFO by call order; returns at once without a limit)."""
        if not self.interval_s:
            return
        now = time.monotonic()
        at = max(now, self._next)
        self._next = at + self.interval_s
        if at > now:
            self.waited_s += at - now
            await asyncio.sleep(at - now)
