"""The rollout pipeline (``loop.max_staleness_steps``) on real parts: a tiny model, the learning
tasks in real Docker sandboxes. k = 0 through the producer equals the synchronous loop bit for
bit; with k >= 1 no turn is staler than k steps; a failed episode is masked, the step trains.
Plus the busy-time arithmetic on known intervals."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from swerl.trainer.persistence import checkpoint as ckpt
from swerl.trainer.rollouts import pipeline
from swerl.trainer.rollouts.busy import BusyClock
from swerl.trainer.loop import train

from ..test_loop import records, tiny_config

PIPELINE_METRICS = ["async/staleness_mean", "async/staleness_max", "timing/wait_for_rollouts_s",
                    "rollout/buffer_depth", "async/busy_generation", "async/busy_sandbox", "async/busy_update"]


SAMPLE_KEYS = ("group_id", "sample_index", "response_ids", "rollout_logprobs", "reward", "advantage",
               "turn_weight_versions")


def dumped(run_dir: Path) -> dict[int, list[dict]]:
    """Per step, every dumped trajectory row."""
    return {int(p.stem.split("_")[1]): [json.loads(line) for line in p.read_text().splitlines()]
            for p in (run_dir / "trajectories").glob("step_*.jsonl")}


def untimed(run_dir: Path) -> list[dict]:
    """Records without the timing-dependent keys (wall times, busy fractions, buffer depth, idle slots)."""
    return [{k: v for k, v in r.items() if not k.startswith(("timing/", "async/busy", "rollout/buffer", "rollout/slot", "sandbox/"))}
            for r in records(run_dir)]


def test_busy_clock_splits_rollout_time_into_generation_and_sandbox():
    clock = BusyClock()
    t0 = time.monotonic()
    clock._done = {"rollout": [(t0, t0 + 4.0)], "generation": [(t0 + 1.0, t0 + 2.0), (t0 + 1.5, t0 + 3.0)],
                   "update": [(t0 + 3.0, t0 + 5.0)]}
    seconds = clock.seconds(t0, t0 + 4.0)  # the update's last second falls outside the window
    assert seconds == pytest.approx({"generation": 2.0, "sandbox": 2.0, "update": 1.0})
    assert clock.fractions(t0, t0 + 4.0)["async/busy_update"] == pytest.approx(0.25)


def test_staleness_counts_steps_behind_the_oldest_turn():
    from swerl.agent.trajectory import Trajectory

    rows = [Trajectory(task_name="t", group_id="g", prompt_ids=[1], turn_weight_versions=v) for v in ([3, 5], [5], [])]
    assert pipeline.staleness(rows, step=6) == [2, 0]  # step 6 trains version 5; a row without turns is skipped
    assert pipeline.staleness_metrics(rows, 6) == {"async/staleness_mean": 1.0, "async/staleness_max": 2.0}


@pytest.mark.docker
@pytest.mark.slow
def test_k0_through_the_producer_thread_equals_the_synchronous_loop(tmp_path, tiny_model_dir, monkeypatch):
    cfg = tiny_config(tiny_model_dir)
    train(cfg, tmp_path / "inline")
    monkeypatch.setattr(pipeline, "THREADED_AT_ZERO", True)
    train(cfg, tmp_path / "threaded")

    # same losses, rewards, ratios; only what the sync moves differs (the producer's copy receives the weights)
    threaded, inline = untimed(tmp_path / "threaded"), untimed(tmp_path / "inline")
    assert {r.pop("inference/weight_sync_bytes") for r in inline} == {0.0}
    assert {r.pop("inference/weight_sync_bytes") for r in threaded} == {4.0 * sum(
        p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model_dir).parameters())}
    assert threaded == inline
    samples = {run: {step: [{k: r[k] for k in SAMPLE_KEYS} for r in rows] for step, rows in dumped(tmp_path / run).items()}
               for run in ("inline", "threaded")}
    assert samples["threaded"] == samples["inline"]  # same samples, log-probs, advantages; versions 0, 1, 2
    assert [r["turn_weight_versions"] for r in samples["inline"][3]] == [[2]] * 8
    a = ckpt.read_model_state(tmp_path / "inline" / "checkpoints" / "global_step_3")
    b = ckpt.read_model_state(tmp_path / "threaded" / "checkpoints" / "global_step_3")
    assert all(torch.equal(a[k], b[k]) for k in a)


K = 1
FAILED_GROUP, FAILED_SAMPLE = "step2/0:", 0


@pytest.fixture(scope="module")
def async_run(tmp_path_factory, tiny_model_dir) -> Path:
    """A 4-step run at k = 1 whose update is slowed (so the producer runs ahead) and in which one
    episode of step 2 crashes."""
    import swerl.agent.collect as agent_rollout
    import swerl.trainer.loop as loop

    real_update, real_episode = loop.train_on_batch, agent_rollout.play_episode

    def slow_update(*args, **kwargs):
        time.sleep(2.0)  # a trainer slower than the rollouts: batch s + 1 is sampled by version s - 1
        return real_update(*args, **kwargs)

    async def crashing_episode(task, sandbox, policy, cfg, *, seed, **kwargs):
        # The episode is known by its seed, made from its group id and sample index.
        if seed == agent_rollout._episode_seed(cfg.seed, f"{FAILED_GROUP}{task.name}", FAILED_SAMPLE):
            raise RuntimeError("injected episode crash")
        return await real_episode(task, sandbox, policy, cfg, seed=seed, **kwargs)

    run_dir = tmp_path_factory.mktemp("async") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "train_on_batch", slow_update)
        mp.setattr(agent_rollout, "play_episode", crashing_episode)
        result = train(tiny_config(tiny_model_dir, max_steps=4, max_staleness_steps=K), run_dir)
    assert result.steps_trained == 4
    return run_dir


@pytest.mark.docker
@pytest.mark.slow
def test_no_turn_is_staler_than_the_bound_and_some_are_stale(async_run):
    per_step = {}
    for step, rows in dumped(async_run).items():
        lags = [step - 1 - min(r["turn_weight_versions"]) for r in rows if r["turn_weight_versions"]]
        assert lags and max(lags) <= K, (step, lags)
        per_step[step] = max(lags)
    recs = records(async_run)
    assert all(r["async/staleness_max"] <= K for r in recs)
    assert max(per_step.values()) == K  # the producer did run ahead of the slowed trainer
    assert [per_step[r["global_step"]] for r in recs] == [r["async/staleness_max"] for r in recs]
    missing = [k for k in PIPELINE_METRICS if k not in recs[0]]
    assert not missing, missing


@pytest.mark.docker
@pytest.mark.slow
def test_a_crashed_episode_is_settled_by_a_control_and_its_step_trains(async_run):
    """A crash inside one episode is no proof against the infrastructure: its control run reads a
    reward, so the crash is the attempt's (zero, kept in the baseline), and the step trains."""
    step2 = records(async_run)[1]
    assert step2["global_step"] == 2
    assert step2["outcome/episode_error"] == 1 and step2["rollout/zeroed_by_control"] == 1
    assert step2["rollout/masked_by_control"] == 0 and step2["rollout/control_s"] > 0
    assert step2["reward/num_trajectories"] == 8  # the group stays whole: nothing dropped
    crashed = [r for r in dumped(async_run)[2] if r["outcome"] == "episode_error"]
    assert [(r["group_id"].startswith(FAILED_GROUP), r["sample_index"]) for r in crashed] == [(True, FAILED_SAMPLE)]
    assert crashed[0]["failure_class"] == "zero" and crashed[0]["blame"] == "attempt" and not crashed[0]["exclude_from_baseline"]
    assert "loss/policy" in step2 and [r["global_step"] for r in records(async_run)] == [1, 2, 3, 4]
    assert not (async_run / "flagged_tasks.jsonl").exists()


def test_the_dry_run_plan_shows_the_pipeline_of_the_seed_config():
    from swerl.trainer.config import load_train_config
    from swerl.trainer.setup.plan import make_plan

    root = Path(__file__).resolve().parents[3] / "examples"
    lines = dict(make_plan(load_train_config(root / "rloo-seqnorm-tis-qwen3-8b.yaml"), 1000).placement)
    assert "up to 16 steps ahead" in lines["rollout pipeline"] and "vLLM" in lines["pipeline engines"]
    assert "between two requests" in lines["pipeline engines"]  # the seed run keeps the timing-driven schedule
    exact = dict(make_plan(load_train_config(root / "rloo-seqnorm-tis-qwen3-8b.yaml", ["loop.exact_staleness=true"]),
                           1000).placement)
    assert exact["rollout pipeline"].startswith("producer thread 16 steps ahead") and "staleness exactly 16" in \
        exact["rollout pipeline"] and "between two batches only" in exact["pipeline engines"]
    demo = dict(make_plan(load_train_config(root / "humaneval-smollm2-cpu.yaml"), 12).placement)
    assert demo["rollout pipeline"].startswith("producer thread 1 step ahead") and "exact schedule" in demo["rollout pipeline"]
    sync = dict(make_plan(load_train_config(root / "humaneval-smollm2-cpu.yaml", ["loop.max_staleness_steps=0"]), 12).placement)
    assert sync["rollout pipeline"].startswith("synchronous")


def test_weights_staged_during_a_generate_call_reach_the_next_call():
    import threading

    from swerl.trainer.rollouts.busy import MeteredBackend

    class SlowBackend:  # returns the version it generated with
        weight_version = 0

        def generate(self, prompts, sampling, seeds=None):
            time.sleep(0.3)
            return [self.weight_version] * len(prompts)

    backend = MeteredBackend(SlowBackend(), BusyClock())
    first: list = []
    call = threading.Thread(target=lambda: first.extend(backend.generate([[1]], None)))
    call.start()
    time.sleep(0.1)
    with backend.exclusive(blocking=False) as idle:
        assert idle is None  # a call is running: the trainer does not wait for it
    backend.stage(lambda inner: setattr(inner, "weight_version", 7))
    call.join()
    assert first == [0] and backend.generate([[1]], None, seeds=[3]) == [7]
