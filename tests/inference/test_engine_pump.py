"""The in-process engine's pause (``engine_pump.RequestPump``): the step loop stops between two
steps with its requests left inside the engine, a control call (the weight reload) runs on the
owner thread while they are frozen, and after ``resume`` they finish with every token, each
carrying the weight version it was submitted under. The engine is a small stand-in for vLLM's
``LLMEngine`` (add_request / step / abort): the pump's own code is what runs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from swerl.inference.backends.base import Generation
from swerl.inference.engines.engine_pump import RequestPump
from swerl.inference.engines.engine_thread import EngineThread


@dataclass
class Output:
    request_id: str
    token_ids: list[int] = field(default_factory=list)
    finished: bool = False


class CountingEngine:
    """One token per request per step (its value: the engine's weight version then); a request
    finishes after ``length`` tokens."""

    def __init__(self, length: int) -> None:
        self.length, self.version, self.steps = length, 0, 0
        self.requests: dict[str, Output] = {}
        self.lock = threading.Lock()

    def add_request(self, request_id, prompt, params, lora_request=None) -> None:
        self.requests[request_id] = Output(request_id)

    def step(self) -> list[Output]:
        time.sleep(0.005)
        with self.lock:
            self.steps += 1
            for out in self.requests.values():
                out.token_ids.append(self.version)
                out.finished = len(out.token_ids) >= self.length
            done = [o for o in self.requests.values() if o.finished]
            self.requests = {k: o for k, o in self.requests.items() if not o.finished}
        return done

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def abort_request(self, ids) -> None:
        for request_id in ids:
            self.requests.pop(request_id, None)


def test_paused_requests_stay_in_the_engine_through_a_reload_and_finish_with_their_tokens():
    engine, thread = CountingEngine(length=40), EngineThread()
    pump = RequestPump(thread, lambda: engine, lambda out, version: Generation(
        token_ids=list(out.token_ids), logprobs=[0.0] * len(out.token_ids), finish_reason="length",
        weight_version=version))
    try:
        futures = [pump.submit(object(), None, None, version=0) for _ in range(3)]
        while engine.steps < 5:
            time.sleep(0.005)
        pump.pause()

        def reload() -> tuple[int, int]:  # runs on the owner thread, after the loop stopped
            steps = engine.steps
            time.sleep(0.05)
            engine.version = 1
            return steps, engine.steps

        before, after = thread.call(reload)
        assert before == after  # nothing stepped during the reload
        assert pump.num_in_flight == 3 and not any(f.done() for f in futures)
        late = pump.submit(object(), None, None, version=1)  # queued while paused
        time.sleep(0.05)
        assert engine.steps == after and not late.done()
        pump.resume()
        results = [f.result(timeout=10) for f in futures]
        for gen in results:
            assert len(gen.token_ids) == 40 and gen.weight_version == 0  # every token; its oldest version
            assert 0 in gen.token_ids and 1 in gen.token_ids  # sampled on both sides of the update
        assert late.result(timeout=10).weight_version == 1 and set(late.result().token_ids) == {1}
    finally:
        pump.stop()
        thread.close()


def test_stopping_a_paused_pump_fails_its_frozen_requests():
    engine, thread = CountingEngine(length=10_000), EngineThread()
    pump = RequestPump(thread, lambda: engine, lambda out, version: None)
    try:
        future = pump.submit(object(), None)
        while engine.steps < 2:
            time.sleep(0.005)
        pump.pause()
        time.sleep(0.05)
        pump.stop()
        assert isinstance(future.exception(timeout=10), Exception) and not engine.requests
    finally:
        thread.close()
