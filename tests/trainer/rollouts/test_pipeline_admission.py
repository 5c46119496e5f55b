"""Continuous admission on the timing-driven schedule (k = 1, ``loop.exact_staleness: false``) on
real parts: the tiny model on the HF generator, the learning tasks in real Docker sandboxes, 4
episode slots for batches of 2 prompts x 4 samples. One episode of batch 1 holds its slot long
after the others end (a slow agent); batch 2's episodes start in the slots batch 1's finished
episodes free, before the slow one ends, yet every batch reaches the trainer whole, in order, and
no turn is staler than k. Plus the slot budget's arithmetic on a known schedule."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from swerl.trainer.loop import train

from ..test_loop import records, tiny_config
from .test_pipeline import dumped

K, STEPS, GROUPS, SAMPLES = 1, 3, 2, 4
SLOW_GROUP, SLOW_SAMPLE = "step1/0:", 0  # the slow episode: batch 1, first prompt, sample 0
HOLD_S = 40.0  # the slow episode's extra time, cut short once a later batch's episode has started


def test_the_budget_counts_idle_slot_seconds_over_a_batch_span():
    from swerl.trainer.rollouts.slots import SlotBudget

    async def schedule() -> dict:
        budget = SlotBudget(2)
        first, second = budget.batch(2), budget.batch(1)
        at = {}

        async def long() -> None:
            async with first:
                at["long_in"] = time.monotonic()
                await asyncio.sleep(0.4)
            at["long_out"] = time.monotonic()

        async with first:  # batch 1: this short episode and the long one
            at["short_in"] = time.monotonic()
            running = asyncio.create_task(long())
            await asyncio.sleep(0.1)
        at["short_out"] = time.monotonic()
        await asyncio.sleep(0.1)  # one slot idle meanwhile
        at["all_first_started"], at["second_started"] = first.all_started.is_set(), second.all_started.is_set()
        async with second:  # batch 2 fills the freed slot until batch 1 ends
            at["second_in"] = time.monotonic()
            await running
        at["second_out"] = time.monotonic()
        at["idle"] = (first.idle_share(), second.idle_share())
        return at

    at = asyncio.run(schedule())
    assert at["all_first_started"] and not at["second_started"]
    span = at["long_out"] - at["short_in"]  # batch 1: first start to last finish, 2 slots
    idle = (at["long_in"] - at["short_in"]) + (at["second_in"] - at["short_out"])
    assert at["idle"][0] == pytest.approx(idle / (2 * span), abs=0.01)
    assert 0.05 < at["idle"][0] < 0.3  # about 0.1 s of 2 x 0.4 s
    second_span = at["second_out"] - at["second_in"]  # both slots held throughout, bar the switch
    assert at["idle"][1] == pytest.approx((at["second_out"] - at["long_out"]) / (2 * second_span), abs=0.01)


def step_of(base_seed: int, task_name: str, seed: int) -> tuple[int, str, int]:
    """(step, group id, sample index) of a training episode, from its seed."""
    from swerl.agent.collect import _episode_seed

    for step in range(1, STEPS + 1):
        for index in range(GROUPS):
            for sample in range(SAMPLES):
                group = f"step{step}/{index}:{task_name}"
                if _episode_seed(base_seed, group, sample) == seed:
                    return step, group, sample
    raise AssertionError(f"no episode of the plan has seed {seed}")


@pytest.fixture(scope="module")
def admission_run(tmp_path_factory, tiny_model_dir) -> tuple[Path, list[dict]]:
    """A 3-step run at k = 1, timing-driven, whose episode (batch 1, first prompt, sample 0) holds
    its slot for up to HOLD_S seconds more; returns the run and every episode's span (monotonic
    seconds, taken around the agent's episode inside its slot)."""
    import swerl.agent.collect as agent_rollout

    real_episode = agent_rollout.play_episode
    spans: list[dict] = []

    async def timed_episode(task, sandbox, policy, cfg, *, seed, **kwargs):
        step, group, sample = step_of(cfg.seed, task.name, seed)
        span = {"step": step, "slow": group.startswith(SLOW_GROUP) and sample == SLOW_SAMPLE,
                "start": time.monotonic()}
        spans.append(span)
        if span["slow"]:
            while time.monotonic() - span["start"] < HOLD_S and not any(s["step"] > 1 for s in spans):
                await asyncio.sleep(0.1)
        try:
            return await real_episode(task, sandbox, policy, cfg, seed=seed, **kwargs)
        finally:
            span["end"] = time.monotonic()

    run_dir = tmp_path_factory.mktemp("admission") / "run"
    cfg = tiny_config(tiny_model_dir, max_steps=STEPS, max_staleness_steps=K, exact_staleness=False)
    assert cfg.sandbox.concurrency == 4 and cfg.loop.train_batch_size == GROUPS and cfg.n_samples == SAMPLES
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(agent_rollout, "play_episode", timed_episode)
        result = train(cfg, run_dir)
    assert result.steps_trained == STEPS
    return run_dir, spans


@pytest.mark.docker
@pytest.mark.slow
def test_the_next_batch_starts_in_the_slots_the_slow_episode_leaves_idle(admission_run):
    _, spans = admission_run
    [slow] = [s for s in spans if s["slow"]]
    first = [s for s in spans if s["step"] == 1]
    second = [s for s in spans if s["step"] == 2]
    assert len(first) == GROUPS * SAMPLES and len(second) == GROUPS * SAMPLES
    # every episode of batch 1 started before any of batch 2 (a batch takes freed slots only once
    # all its predecessor's episodes hold one) ...
    assert max(s["start"] for s in first) <= min(s["start"] for s in second)
    # ... and batch 2 started while the slow episode of batch 1 still held its slot
    early = [s for s in second if s["start"] < slow["end"]]
    assert early, (slow, sorted(s["start"] for s in second))
    assert slow["end"] - slow["start"] < HOLD_S  # it was released by batch 2's start, not by the clock


@pytest.mark.docker
@pytest.mark.slow
def test_every_batch_arrives_whole_in_order_within_the_staleness_bound(admission_run):
    run_dir, _ = admission_run
    recs = records(run_dir)
    assert [r["global_step"] for r in recs] == list(range(1, STEPS + 1))
    rows = dumped(run_dir)
    for step in range(1, STEPS + 1):
        got = rows[step]
        assert len(got) == GROUPS * SAMPLES and all(r["group_id"].startswith(f"step{step}/") for r in got), step
        groups = {}
        for r in got:
            groups.setdefault(r["group_id"], []).append(r["sample_index"])
        assert sorted(map(sorted, groups.values())) == [list(range(SAMPLES))] * GROUPS  # groups complete
        lags = [step - 1 - min(r["turn_weight_versions"]) for r in got if r["turn_weight_versions"]]
        assert lags and max(lags) <= K, (step, lags)
    slow_rows = [r for r in rows[1] if r["group_id"].startswith(SLOW_GROUP) and r["sample_index"] == SLOW_SAMPLE]
    assert len(slow_rows) == 1 and slow_rows[0]["turn_weight_versions"] == [0]  # the slow episode, trained at step 1
    assert all(r["async/staleness_max"] <= K and r["reward/num_trajectories"] == GROUPS * SAMPLES for r in recs)
    assert all(0.0 <= r["rollout/slot_idle_share"] <= 1.0 for r in recs)
