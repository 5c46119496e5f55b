"""Run a coroutine so that SIGTERM and SIGHUP unwind it like Ctrl-C: the main task is
cancelled, every ``finally`` (sandbox removal, pool drain) runs, then the process exits."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(SystemExit):
    """Raised by :func:`run_async` after cleanup when SIGTERM/SIGHUP stopped the run (exit 143)."""

    def __init__(self) -> None:
        super().__init__(143)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` with SIGTERM/SIGHUP mapped to cancellation of the main task.

    Raises:
        Terminated: a terminating signal arrived (after cleanup).
        KeyboardInterrupt: Ctrl-C (after cleanup; asyncio.run's own SIGINT handling).
    """
    got_signal: list[int] = []

    async def main() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def stop(sig: int) -> None:
            got_signal.append(sig)
            task.cancel()

        for sig in TERMINATING:
            loop.add_signal_handler(sig, stop, sig)
        try:
            return await coro
        finally:
            for sig in TERMINATING:
                loop.remove_signal_handler(sig)

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if got_signal:
            raise Terminated() from None
        raise
