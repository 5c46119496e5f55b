"""Placement of trials on the engines of a fleet, and the health of each engine.

A trial goes to the healthy engine with the most free slots (ties: fewer in use, then the
order of ``sandbox.engines``). An engine that stops answering (a trial failed with a Docker
error and a ping then went unanswered) is quarantined: no trial is placed on it, and it is
probed with exponential backoff (``engine_probe_s``, doubling up to 30 s) until it answers
again, when it rejoins. With no engine healthy, placement fails at once with ``daemon_error``
(``sandbox-test`` and the trainer then end with exit 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from swerl.errors import EnvironmentProblem, SandboxError
from swerl.sandbox.deployment.engine import Engine
from swerl.sandbox.types import Outcome

log = logging.getLogger(__name__)
MAX_PROBE_S = 30.0


class Fleet:
    """The engines of one manager.

    Args:
        engines: in config order (not yet open).
        probe_s: first wait before a quarantined engine is probed, seconds.
    """

    def __init__(self, engines: list[Engine], probe_s: float) -> None:
        self.engines = engines
        self._probe_s = probe_s
        self._changed = asyncio.Condition()
        self._probes: dict[str, asyncio.Task[None]] = {}

    @property
    def healthy(self) -> list[Engine]:
        """The engines trials may go to now."""
        return [e for e in self.engines if e.healthy]

    async def open(self) -> None:
        """Open every engine at once; those that fail are quarantined (and probed).

        Raises:
            EnvironmentProblem: (exit 3) no engine could be opened (the first engine's error).
        """
        results = await asyncio.gather(*(e.open() for e in self.engines), return_exceptions=True)
        errors = [(e, r) for e, r in zip(self.engines, results) if isinstance(r, BaseException)]
        for engine, err in errors:
            if not isinstance(err, (EnvironmentProblem, SandboxError)):
                raise err
        if len(errors) == len(self.engines):
            raise errors[0][1]
        for engine, err in errors:
            engine.last_error = str(err)
            log.warning("engine %s left out: %s", engine.url, err)
            self._start_probe(engine, reconnect=True)

    def pick(self, prefer: str | None = None) -> Engine | None:
        """The engine of URL ``prefer`` when it is healthy with a free slot, else the healthy engine
        with the most free slots, or None when all are full."""
        ready = [e for e in self.healthy if e.free > 0]
        if not ready:
            return None
        preferred = [e for e in ready if e.url == prefer]
        if preferred:
            return preferred[0]
        return max(ready, key=lambda e: (e.free, -e.in_use, -self.engines.index(e)))

    @contextlib.asynccontextmanager
    async def slot(self, prefer: str | None = None) -> AsyncIterator[Engine]:
        """Hold one slot on the engine :meth:`pick` chooses (waits while every engine is full).

        Raises:
            SandboxError: (``daemon_error``) every engine is quarantined.
        """
        async with self._changed:
            while (engine := self.pick(prefer)) is None:
                if not self.healthy:
                    raise SandboxError("every Docker engine stopped answering: " + "; ".join(
                        f"{e.url}: {e.last_error or 'down'}" for e in self.engines), outcome=Outcome.daemon_error)
                await self._changed.wait()
            engine.in_use += 1
            engine.trials += 1
        try:
            yield engine
        finally:
            engine.in_use -= 1
            await self._notify()

    async def check(self, engine: Engine, reason: str) -> bool:
        """After a Docker error on ``engine``: True (and the engine quarantined) when it no
        longer answers a ping, False when it does (the error was the trial's own)."""
        if not engine.healthy:
            return True
        if await engine.answers():
            return False
        engine.quarantine(reason)
        self._start_probe(engine)
        await self._notify()
        return True

    def _start_probe(self, engine: Engine, reconnect: bool = False) -> None:
        if engine.url not in self._probes or self._probes[engine.url].done():
            self._probes[engine.url] = asyncio.create_task(self._probe(engine, reconnect), name=f"swerl-probe-{engine.url}")

    async def _probe(self, engine: Engine, reconnect: bool) -> None:
        """Ping ``engine`` with backoff until it answers, then let it rejoin."""
        wait = self._probe_s
        while True:
            await asyncio.sleep(wait)
            wait = min(wait * 2, MAX_PROBE_S)
            if reconnect:
                try:
                    await engine.open()
                except (EnvironmentProblem, SandboxError) as err:
                    engine.last_error = str(err)
                    continue
            elif not await engine.answers():
                continue
            else:
                await asyncio.to_thread(engine.rejoin)
            await self._notify()
            return

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def close(self) -> None:
        """Stop the probes and close every engine (each drains and sweeps its own leftovers)."""
        for task in self._probes.values():
            task.cancel()
        await asyncio.gather(*self._probes.values(), return_exceptions=True)
        await asyncio.gather(*(e.close() for e in self.engines), return_exceptions=True)
