"""The owner thread of an in-process engine: every call runs on one thread, in order, whoever calls;
errors come back to the caller; a call from inside a call does not deadlock."""

from __future__ import annotations

import threading

import pytest

from swerl.inference.engines.engine_thread import EngineThread


def test_every_call_runs_on_one_thread_whichever_thread_calls() -> None:
    owner = EngineThread(name="test-engine")
    try:
        seen = [owner.call(threading.get_ident)]
        callers = [threading.Thread(target=lambda: seen.append(owner.call(threading.get_ident))) for _ in range(3)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join()
        assert len(seen) == 4 and len(set(seen)) == 1 and seen[0] != threading.get_ident()
        assert owner.call(lambda: owner.call(threading.get_ident)) == seen[0]  # re-entrant: runs directly
        with pytest.raises(ValueError, match="boom"):
            owner.call(lambda: (_ for _ in ()).throw(ValueError("boom")))
    finally:
        owner.close()
    with pytest.raises(RuntimeError):
        owner.call(threading.get_ident)
