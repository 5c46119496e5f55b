"""Rollout collection over real sandboxes: grouping, bounded concurrency, failures masked
without cancelling the rest, and the eval output files."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from swerl.agent.config import AgentConfig, EpisodeLimits
from swerl.agent.evaluate import evaluate, write_eval_outputs
from swerl.agent.policy import BackendPolicy, ScriptedPolicy
from swerl.agent.collect import collect_rollouts
from swerl.inference.backends.batcher import AsyncBatcher
from swerl.inference.backends.hf import HFBackend
from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.tasks.load import load_task
from swerl.trainer.tracking.metrics import sandbox_metrics

pytestmark = pytest.mark.docker

FIXTURE_TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"
SOLVE_ADD_TWO = "```python\ndef add_two(x):\n    return x + 2\n```"


@pytest.fixture
def broken_task(tmp_path: Path):
    """add-two whose image build fails (an infrastructure failure)."""
    folder = tmp_path / "broken-build"
    shutil.copytree(FIXTURE_TASKS / "add-two", folder)
    (folder / "environment" / "Dockerfile").write_text("FROM python:3.10-slim\nRUN exit 3\n")
    return load_task(folder)


def test_rollouts_are_grouped_and_a_broken_sandbox_is_masked(broken_task, smol_tokenizer):
    tasks = [load_task(FIXTURE_TASKS / "add-two"), broken_task, load_task(FIXTURE_TASKS / "count-vowels")]
    policy = ScriptedPolicy([SOLVE_ADD_TWO], smol_tokenizer)
    events = []
    live, peak = 0, 0

    def on_event(event):
        nonlocal live, peak
        events.append(event)
        if event.kind == "started":
            live += 1
        elif event.kind == "finished" and event.trajectory.end_reason != "sandbox_error":
            live -= 1
        peak = max(peak, live)

    async def main():
        async with SandboxManager(SandboxConfig(concurrency=4, warm_pool=False)) as manager:
            return await collect_rollouts(tasks, 2, policy, manager, AgentConfig(protocol="single-turn"),
                                          concurrency=2, on_event=on_event)

    trajs = asyncio.run(main())
    assert [(t.task_name, t.sample_index) for t in trajs] == [
        ("add-two", 0), ("add-two", 1), ("broken-build", 0), ("broken-build", 1), ("count-vowels", 0), ("count-vowels", 1)]
    assert len({t.group_id for t in trajs}) == 3 and trajs[0].group_id == trajs[1].group_id
    assert [t.outcome for t in trajs] == ["passed", "passed", "build_error", "build_error", "failed", "failed"]
    broken = trajs[2]
    assert broken.failure_class == "mask" and broken.exclude_from_baseline and broken.response_ids == []
    assert broken.prompt_ids == trajs[0].prompt_ids  # same instruction, same first prompt
    assert sum(e.kind == "finished" for e in events) == 6 and events[-1].done == 6
    assert sum(e.kind == "started" for e in events) == 4  # the broken sandboxes never started
    # Each started episode goes to its verifier between starting and finishing (what the heartbeat counts).
    for key in {(e.task_name, e.sample_index) for e in events if e.kind == "started"}:
        kinds = [e.kind for e in events if (e.task_name, e.sample_index) == key]
        assert kinds == ["started", "verifying", "finished"], (key, kinds)
    assert peak <= 2
    # No warm pool: each started episode's one container (same-container verification) was started on demand.
    assert [(t.timings_s.get("containers_warm"), t.timings_s.get("containers_cold")) for t in trajs] == [
        (0.0, 1.0), (0.0, 1.0), (None, None), (None, None), (0.0, 1.0), (0.0, 1.0)]
    waits = [t.timings_s["container_wait_s"] for t in trajs if "container_wait_s" in t.timings_s]
    assert len(waits) == 4 and all(w > 0 for w in waits)
    assert sandbox_metrics(trajs) == {"sandbox/pool_hit_rate": 0.0, "sandbox/container_wait_s": pytest.approx(sum(waits) / 4)}


def test_episodes_on_planned_and_filled_pools_take_every_container_warm(smol_tokenizer):
    """The step's plan fills the pool before the step: its 4 episodes wait for no container start."""
    task = load_task(FIXTURE_TASKS / "add-two")
    policy = ScriptedPolicy([SOLVE_ADD_TWO], smol_tokenizer)

    async def main():
        async with SandboxManager(SandboxConfig(concurrency=4)) as manager:
            assert await manager.plan([task], 4) == 4
            pool = next(iter(manager.engines[0].pools.values()))
            while pool.idle < pool.size:
                await asyncio.sleep(0.1)
            return await collect_rollouts([task], 4, policy, manager, AgentConfig(protocol="single-turn"), concurrency=4)

    trajs = asyncio.run(main())
    assert [t.outcome for t in trajs] == ["passed"] * 4
    assert sandbox_metrics(trajs)["sandbox/pool_hit_rate"] == 1.0


def test_an_episode_without_a_reward_is_masked_only_when_its_control_fails_too(smol_tokenizer):
    """The agent replaces bash, so the verifier script of its (same) container reports nothing: on
    `add` the control reads a reward (zero, blamed on the attempt, tokens kept); on a task whose
    verifier never writes one the control fails too (mask, blamed on the infrastructure)."""
    from swerl.agent.metrics import summarize

    sandbox_tasks = Path(__file__).resolve().parents[1] / "fixtures" / "sandbox_tasks"
    tasks = [load_task(sandbox_tasks / "add"), load_task(sandbox_tasks / "no_reward_file")]
    fake_bash = ("for f in /usr/bin/bash /bin/bash; do printf '#!/bin/sh\\nexit 0\\n' > $f.new && chmod 755 $f.new "
                 "&& mv -f $f.new $f; done")
    call = '<tool_call>{"name": "bash", "arguments": {"command": "' + fake_bash + '"}}</tool_call>'
    policy = ScriptedPolicy([call, "done", call, "done"], smol_tokenizer)  # one episode after the other

    async def main():
        async with SandboxManager(SandboxConfig(concurrency=2)) as manager:
            return await collect_rollouts(tasks, 1, policy, manager, AgentConfig(protocol="tool-call"), concurrency=1)

    zeroed, masked = asyncio.run(main())
    assert (zeroed.outcome, zeroed.failure_class, zeroed.blame, zeroed.reward) == ("no_reward_file", "zero", "attempt", 0.0)
    assert not zeroed.exclude_from_baseline and sum(zeroed.loss_mask) > 0 and zeroed.timings_s["control_s"] > 0
    assert "the control read reward 0" in zeroed.detail
    assert (masked.failure_class, masked.blame) == ("mask", "infrastructure") and masked.exclude_from_baseline
    assert sum(masked.loss_mask) == 0 and "the control failed too" in masked.detail
    summary = summarize([zeroed, masked], [1])
    assert (summary["num_zeroed_by_control"], summary["num_masked_by_control"], summary["num_masked"]) == (1, 1, 1)


def test_eval_writes_trajectories_and_summary(tmp_path, smol_tokenizer):
    tasks = [load_task(FIXTURE_TASKS / "add-two"), load_task(FIXTURE_TASKS / "reverse-words")]
    policy = ScriptedPolicy([SOLVE_ADD_TWO], smol_tokenizer)
    trajs, summary = asyncio.run(evaluate(tasks, policy, SandboxConfig(concurrency=2, warm_pool=False),
                                          AgentConfig(protocol="single-turn"), n_samples=2, concurrency=2))
    assert summary["pass@1"] == pytest.approx(0.5) and summary["pass@2"] == pytest.approx(0.5)
    assert summary["outcomes"] == {"passed": 2, "failed": 2}
    traj_path, summary_path = write_eval_outputs(tmp_path / "out", trajs, summary)
    rows = [json.loads(line) for line in traj_path.read_text().splitlines()]
    assert len(rows) == 4 and rows[0]["messages"][-1]["role"] == "assistant"
    assert rows[0]["reward"] == 1.0 and "passed" in rows[0]["verifier_output_tail"]
    assert json.loads(summary_path.read_text())["num_trajectories"] == 4
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["summary.json", "trajectories.jsonl"]


def test_backend_policy_records_sampling_logprobs_on_generated_ids_only(smol_tokenizer, tiny_model):
    # The shell variant counts a cut-off reply as a parse failure (terminus-2 answers it with an ERROR turn).
    cfg = AgentConfig(protocol="terminus-json-fast", temperature=1.0, seed=7,
                      limits=EpisodeLimits(max_new_tokens_per_turn=6, max_consecutive_parse_failures=2))
    tasks = [load_task(FIXTURE_TASKS / "add-two")]

    async def main():
        batcher = AsyncBatcher(HFBackend(tiny_model, smol_tokenizer, seed=0), max_batch_size=2, max_wait_s=0.05)
        try:
            async with SandboxManager(SandboxConfig(concurrency=2, warm_pool=False)) as manager:
                return await collect_rollouts(tasks, 2, BackendPolicy(batcher, smol_tokenizer), manager, cfg,
                                              concurrency=2)
        finally:
            await batcher.close()

    trajs = asyncio.run(main())
    for traj in trajs:  # random weights never produce valid JSON
        assert (traj.end_reason, traj.failure_class, traj.num_turns) == ("parse_failures", "zero", 2)
        generated = [lp for lp, m in zip(traj.rollout_logprobs, traj.loss_mask) if m == 1]
        observed = [lp for lp, m in zip(traj.rollout_logprobs, traj.loss_mask) if m == 0]
        assert len(generated) == traj.num_generated_tokens and all(lp < 0.0 for lp in generated)
        assert observed and all(lp == 0.0 for lp in observed)
    assert trajs[0].response_ids != trajs[1].response_ids  # per-episode seeds differ


def test_a_failure_after_the_episode_never_discards_its_verified_result(smol_tokenizer):
    """An episode that played and was verified keeps its trajectory when what comes after it fails
    (the sandbox's release raising SandboxError or anything else): its reward and tokens stand,
    instead of a masked trajectory with nothing trained."""
    from contextlib import asynccontextmanager

    from swerl.errors import SandboxError

    tasks = [load_task(FIXTURE_TASKS / "add-two")]
    for failure in (SandboxError("the release failed"), RuntimeError("the release failed")):
        policy = ScriptedPolicy([SOLVE_ADD_TWO], smol_tokenizer)

        async def main():
            async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as manager:
                real = manager.sandbox

                @asynccontextmanager
                async def failing_release(task, *args, **kwargs):
                    async with real(task, *args, **kwargs) as sandbox:
                        yield sandbox
                    raise failure

                manager.sandbox = failing_release
                return await collect_rollouts(tasks, 1, policy, manager, AgentConfig(protocol="single-turn"),
                                              concurrency=1)

        (traj,) = asyncio.run(main())
        assert (traj.outcome, traj.reward, traj.failure_class) == ("passed", 1.0, "none"), (failure, traj.detail)
        assert sum(traj.loss_mask) > 0 and not traj.exclude_from_baseline


def test_an_episode_whose_engine_seems_lost_on_its_last_retry_still_gets_its_control(smol_tokenizer):
    """A forced probe: the engine always reads as lost after a reward-less episode (one missed ping
    under load looks the same). Once the retries are spent the control settles the episode as any
    other: it reads a reward on a healthy engine, so the attempt's failure is kept (zero), never
    masked on the ping's word alone."""
    sandbox_tasks = Path(__file__).resolve().parents[1] / "fixtures" / "sandbox_tasks"
    fake_bash = ("for f in /usr/bin/bash /bin/bash; do printf '#!/bin/sh\\nexit 0\\n' > $f.new && chmod 755 $f.new "
                 "&& mv -f $f.new $f; done")
    call = '<tool_call>{"name": "bash", "arguments": {"command": "' + fake_bash + '"}}</tool_call>'
    policy = ScriptedPolicy([call, "done"], smol_tokenizer)
    checked = []

    async def main():
        async with SandboxManager(SandboxConfig(concurrency=2, engine_retries=0)) as manager:
            async def lost(sandbox):  # noqa: ANN001, ANN202
                checked.append(sandbox.placement.engine)
                return True

            manager.engine_lost = lost
            return await collect_rollouts([load_task(sandbox_tasks / "add")], 1, policy, manager,
                                          AgentConfig(protocol="tool-call"), concurrency=1)

    (traj,) = asyncio.run(main())
    assert checked, "the engine was never asked about"
    assert (traj.outcome, traj.failure_class, traj.blame) == ("no_reward_file", "zero", "attempt"), traj.detail
    assert not traj.exclude_from_baseline and sum(traj.loss_mask) > 0
