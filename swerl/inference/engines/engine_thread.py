"""The one thread that owns an in-process vLLM engine: it builds the ``vllm.LLM`` and makes every
call into it (generate, weight reload, sleep/wake, close), whichever thread asks.

Why one thread: an in-process engine keeps per-thread state. On CPU, vLLM's attention builds each
step's work split for the calling thread's OpenMP thread count (``omp_get_max_threads``) and the
kernel checks that count again. A thread that has not run a torch op yet still has OpenMP's
default (all cores), and torch switches it to its own setting (``torch.set_num_threads``) at that
thread's first parallel op, in between. So when the process runs torch on fewer threads than
cores (the trainer or an earlier test set 1 on 2 cores), the first step of a ``generate`` called
from a fresh thread fails (``cpu_attn_impl.hpp: Check failed: input->metadata->thread_num ==
thread_num (2 vs. 1)``). That step's requests stay in vLLM's scheduler, and every later
``generate`` waits for them forever (the rollout producer's hang of the vLLM pipeline test).
The OpenMP thread binding (``VLLM_CPU_OMP_THREADS_BIND``) and, on GPU, the current CUDA device are
also set in the thread that builds the engine. Hence: one owner thread, whose OpenMP count is
torch's before the engine exists.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def _align_openmp_threads() -> None:
    """Give this (new) thread torch's intra-op thread count as its OpenMP count now, not at its
    first parallel op. ``torch._C.set_num_threads`` because vLLM's CPU worker replaces
    ``torch.set_num_threads`` with a no-op once an engine exists."""
    import torch

    torch._C.set_num_threads(torch.get_num_threads())


class EngineThread:
    """A single worker thread that runs every call into one engine, in order.

    Args:
        name: the thread's name (shows in ``py-spy dump``).
    """

    def __init__(self, name: str = "swerl-vllm-engine") -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name, initializer=_align_openmp_threads)
        self._ident = self._pool.submit(threading.get_ident).result()

    def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` on the owner thread; blocks until it returns, raises what it raised.
        A call made from the owner thread itself (a callback inside ``fn``) runs directly."""
        if threading.get_ident() == self._ident:
            return fn(*args, **kwargs)
        return self._pool.submit(fn, *args, **kwargs).result()

    def submit(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Queue ``fn(*args, **kwargs)`` on the owner thread and return at once (its future)."""
        return self._pool.submit(fn, *args, **kwargs)

    def close(self) -> None:
        """Finish the queued calls and end the thread; later calls raise ``RuntimeError``."""
        self._pool.shutdown(wait=True)
