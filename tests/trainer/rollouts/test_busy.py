"""The metered front of a continuous engine (``trainer/rollouts/busy.py``): a weight update waits for the
requests in flight, holds the ones that arrive meanwhile without blocking their sender, and sends
them after, so no request straddles an update and each carries the version it ran with."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

from swerl.inference.backends.base import ContinuousBackend, Generation, SamplingParams
from swerl.trainer.rollouts.busy import BusyClock, MeteredBackend, MeteredStream, metered


class VersionedEngine(ContinuousBackend):
    """Finishes a request when told; the generation carries the version the engine holds then."""

    def __init__(self) -> None:
        self.weight_version = 0
        self.pending: list[Future] = []

    def submit(self, prompt, sampling) -> Future:
        self.pending.append(Future())
        return self.pending[-1]

    def finish_all(self) -> None:
        for future in self.pending:
            if not future.done():
                future.set_result(Generation(token_ids=[1], logprobs=[-1.0], finish_reason="stop",
                                             weight_version=self.weight_version))


class BatchEngine:
    """A batch backend (HF-like): ``generate`` only."""

    def generate(self, prompts, sampling, seeds=None) -> list:
        return []


def test_an_update_waits_for_requests_in_flight_and_holds_new_ones_without_blocking():
    engine, clock = VersionedEngine(), BusyClock()
    front = metered(engine, clock)
    assert isinstance(front, MeteredStream) and isinstance(metered(BatchEngine(), clock), MeteredBackend)
    sampling = SamplingParams()
    first = front.submit([1], sampling)
    entered = threading.Event()

    def update() -> None:
        with front.exclusive() as inner:
            entered.set()
            inner.weight_version = 1  # the reload
            time.sleep(0.1)

    trainer = threading.Thread(target=update)
    trainer.start()
    time.sleep(0.1)
    assert not entered.is_set()  # the update waits for the request in flight
    held = front.submit([2], sampling)  # arrives during the update: returns at once, not sent yet
    assert len(engine.pending) == 1 and not held.done()
    engine.finish_all()
    assert entered.wait(5) and first.result().weight_version == 0
    trainer.join(5)
    assert len(engine.pending) == 2  # sent once the update ended
    engine.finish_all()
    assert held.result().weight_version == 1  # ran entirely on the new weights
    assert clock.seconds(0.0, time.monotonic())["generation"] > 0.1
    with front.exclusive(blocking=False) as idle:
        assert idle is engine  # nothing in flight: the non-blocking update gets the engine


class PausingEngine(VersionedEngine):
    """An engine that can freeze its requests: a generation carries the version it was submitted
    under (its oldest), as vLLM's engines in swerl do."""

    can_pause = True

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self.versions: list[int] = []

    def submit(self, prompt, sampling) -> Future:
        self.versions.append(self.weight_version)
        return super().submit(prompt, sampling)

    def pause(self) -> None:
        self.events.append("pause")

    def resume(self) -> None:
        self.events.append("resume")

    def finish_all(self) -> None:
        for future, version in zip(self.pending, self.versions):
            if not future.done():
                future.set_result(Generation(token_ids=[1, 2], logprobs=[-1.0, -1.0], finish_reason="length",
                                             weight_version=version))


def test_a_paused_update_does_not_wait_for_requests_in_flight_and_keeps_them():
    engine = PausingEngine()
    front = metered(engine, BusyClock())
    sampling = SamplingParams()
    spanning = front.submit([1], sampling)
    with front.exclusive(pause=True) as inner:  # enters at once although a request is in flight
        assert engine.events == ["pause"] and not spanning.done()
        held = front.submit([2], sampling)
        assert len(engine.pending) == 1  # held, not sent to the paused engine
        inner.weight_version = 1  # the reload, under the frozen request
    assert engine.events == ["pause", "resume"] and len(engine.pending) == 2
    engine.finish_all()
    frozen = spanning.result()  # not aborted: its tokens are there, counted by its oldest version
    assert frozen.token_ids == [1, 2] and frozen.weight_version == 0
    assert held.result().weight_version == 1
    with front.exclusive() as drained:  # without pause: the plain drain, no pause call
        assert drained is engine
    assert engine.events == ["pause", "resume"]
