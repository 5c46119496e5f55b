"""AsyncBatcher with a real tiny HF backend: batches form, results match direct calls, errors stay local.
RequestStream (continuous backends): every turn goes out at once and comes back when it finishes."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import pytest

from swerl.errors import InferenceError
from swerl.inference.backends.base import ContinuousBackend, Generation, SamplingParams
from swerl.inference.backends.batcher import AsyncBatcher, RequestStream, make_front
from swerl.inference.backends.hf import HFBackend

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=6)


@pytest.fixture
def backend(tiny_model, tiny_tokenizer) -> HFBackend:
    return HFBackend(tiny_model, tiny_tokenizer, seed=0)


def prompt(index: int) -> list[int]:
    return [1] + [4 + (index * 7 + j) % 40 for j in range(3 + index % 5)]


def test_concurrent_requests_form_batches_and_match_direct_calls(backend: HFBackend) -> None:
    async def main() -> list:
        async with AsyncBatcher(backend, max_batch_size=8, max_wait_s=0.05) as batcher:
            results = await asyncio.gather(*(batcher.generate(prompt(i), GREEDY) for i in range(20)))
            return results, list(batcher.batch_sizes)

    results, sizes = asyncio.run(main())
    assert sum(sizes) == 20 and max(sizes) == 8 and len(sizes) < 20
    for index, result in enumerate(results):
        direct = backend.generate([prompt(index)], GREEDY)[0]
        assert result.token_ids == direct.token_ids
        assert result.logprobs == pytest.approx(direct.logprobs, abs=1e-5)


def test_requests_differing_by_seed_share_a_batch_and_keep_their_seed(backend: HFBackend) -> None:
    samplings = [SamplingParams(max_new_tokens=8, seed=seed) for seed in range(6)]

    async def main() -> list:
        async with AsyncBatcher(backend, max_batch_size=8, max_wait_s=0.05) as batcher:
            results = await asyncio.gather(*(batcher.generate(prompt(0), sp) for sp in samplings))
            return results, list(batcher.batch_sizes)

    results, sizes = asyncio.run(main())
    assert sizes == [6]
    for result, sampling in zip(results, samplings, strict=True):
        assert result.token_ids == backend.generate([prompt(0)], sampling)[0].token_ids
    assert len({tuple(r.token_ids) for r in results}) > 1


def test_different_sampling_settings_never_share_a_batch(backend: HFBackend) -> None:
    hot = SamplingParams(temperature=1.0, max_new_tokens=4, seed=1)

    async def main() -> list:
        async with AsyncBatcher(backend, max_batch_size=8, max_wait_s=0.05) as batcher:
            calls = [batcher.generate(prompt(i), GREEDY if i % 2 else hot) for i in range(6)]
            results = await asyncio.gather(*calls)
            return results, list(batcher.batch_sizes)

    results, sizes = asyncio.run(main())
    assert sorted(sizes) == [3, 3]
    assert [len(r.token_ids) <= 4 for r in results[::2]] == [True] * 3


def test_failing_batch_raises_in_its_callers_only(backend: HFBackend) -> None:
    broken = SamplingParams(temperature=0.0, max_new_tokens=3, top_k=1)

    async def main() -> list:
        async with AsyncBatcher(backend, max_batch_size=8, max_wait_s=0.05) as batcher:
            calls = [batcher.generate(prompt(i), GREEDY) for i in range(3)]
            calls += [batcher.generate([], broken), batcher.generate(prompt(5), broken)]
            first = await asyncio.gather(*calls, return_exceptions=True)
            after = await batcher.generate(prompt(1), broken)  # the worker survived the failure
            return first, after

    first, after = asyncio.run(main())
    assert all(not isinstance(result, Exception) for result in first[:3])
    assert all(isinstance(result, InferenceError) for result in first[3:])
    assert after.token_ids


def test_event_loop_keeps_running_while_a_batch_computes(backend: HFBackend) -> None:
    long = SamplingParams(temperature=0.0, max_new_tokens=64, stop_token_ids=[])

    async def main() -> int:
        ticks = 0
        async with AsyncBatcher(backend, max_batch_size=8, max_wait_s=0.0) as batcher:
            task = asyncio.create_task(batcher.generate(prompt(2), long))
            await asyncio.sleep(0)  # let the worker pick the request up
            while not task.done():
                ticks += 1
                await asyncio.sleep(0.001)
            await task
        return ticks

    assert asyncio.run(main()) >= 5


def test_close_fails_queued_requests_and_refuses_new_ones(backend: HFBackend) -> None:
    async def main() -> tuple:
        batcher = AsyncBatcher(backend, max_batch_size=8, max_wait_s=10.0)
        queued = asyncio.create_task(batcher.generate(prompt(0), GREEDY))
        await asyncio.sleep(0.01)
        await batcher.close()
        outcome = await asyncio.gather(queued, return_exceptions=True)
        with pytest.raises(InferenceError, match="after close"):
            await batcher.generate(prompt(0), GREEDY)
        return outcome

    (outcome,) = asyncio.run(main())
    assert isinstance(outcome, InferenceError)


def test_batcher_survives_successive_event_loops(backend: HFBackend) -> None:
    batcher = AsyncBatcher(backend, max_batch_size=4, max_wait_s=0.01)
    first = asyncio.run(batcher.generate(prompt(0), GREEDY))
    second = asyncio.run(batcher.generate(prompt(0), GREEDY))  # e.g. one asyncio.run per training step
    assert first.token_ids == second.token_ids
    asyncio.run(batcher.close())


class ManualEngine(ContinuousBackend):
    """A continuous engine whose requests finish when the test says so (in any order)."""

    def __init__(self) -> None:
        self.requests: list[tuple[list[int], Future]] = []

    def submit(self, prompt, sampling) -> Future:
        self.requests.append((prompt, Future()))
        return self.requests[-1][1]

    def finish(self, index: int, token: int) -> None:
        self.requests[index][1].set_result(Generation(token_ids=[token], logprobs=[-0.5], finish_reason="stop"))


def test_a_request_stream_sends_each_turn_at_once_and_returns_it_when_it_finishes(backend: HFBackend) -> None:
    engine = ManualEngine()
    assert isinstance(make_front(engine, 8, 10.0), RequestStream)  # chosen by type: no batch, no wait
    assert isinstance(make_front(backend, 8, 10.0), AsyncBatcher)

    async def main() -> list:
        stream = RequestStream(engine)
        order: list[int] = []

        async def turn(index: int) -> None:
            order.append((await stream.generate(prompt(index), GREEDY)).token_ids[0])

        tasks = [asyncio.create_task(turn(i)) for i in range(3)]
        await asyncio.sleep(0.05)
        assert len(engine.requests) == 3 and stream.in_flight == 3  # all sent, none waits for a batch
        engine.finish(2, 12)  # the last one sent finishes first: its episode moves on at once
        await asyncio.sleep(0.05)
        assert order == [12] and stream.in_flight == 2
        late = asyncio.create_task(turn(3))  # a request arriving meanwhile joins those in flight
        await asyncio.sleep(0.05)
        engine.finish(3, 13), engine.finish(0, 10), engine.finish(1, 11)
        await asyncio.gather(*tasks, late)
        return order, stream.max_in_flight

    order, most = asyncio.run(main())
    assert order == [12, 13, 10, 11] and most == 3
