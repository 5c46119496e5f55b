"""Step metrics: the names and values of docs/metrics.md, metrics.jsonl records, TensorBoard, trajectory dumps."""

from __future__ import annotations

import json

import pytest

from swerl.trainer.tracking.metrics import (
    FLAGGED_FILE, MetricsSink, dump_trajectories, effective_reward, record_flagged, rollout_metrics,
)

from .._support import make_trajectories


def test_rollout_metrics_follow_the_spec():
    trajs = make_trajectories(num_groups=2, group_size=2, seed=0)
    trajs[0] = trajs[0].model_copy(update={"reward": 1.0, "outcome": "passed"})
    trajs[1] = trajs[1].model_copy(update={"reward": 0.0, "outcome": "failed"})
    # an infra failure whose stale reward must count as 0, and an agent failure
    trajs[2] = trajs[2].model_copy(update={"reward": 1.0, "failure_class": "mask", "outcome": "start_error"})
    trajs[3] = trajs[3].model_copy(update={"reward": 0.0, "failure_class": "zero", "outcome": "agent_timeout",
                                           "hit_length_limit": True})
    m = rollout_metrics(trajs)
    assert m["reward/avg_raw_reward"] == pytest.approx(0.25)
    assert m["reward/avg_pass_at_n"] == pytest.approx(0.5)
    gen = [sum(t.loss_mask) for t in trajs]
    assert m["response_length/mean"] == pytest.approx(sum(gen) / 4)
    assert m["response_length/max"] == max(gen)
    assert m["response_length/reward_pos_mean"] == gen[0]
    assert m["response_length/reward_zero_mean"] == pytest.approx(sum(gen[1:]) / 3)
    assert m["response_length/clip_fraction"] == 0.25
    assert m["failure_class/mask"] == 1 and m["failure_class/zero"] == 1 and m["failure_class/none"] == 2
    assert m["outcome/passed"] == 1 and m["outcome/start_error"] == 1
    assert m["tokens/generated"] == sum(gen)
    assert m["reward/tamper_suspect_rate"] == 0.0
    trajs[1] = trajs[1].model_copy(update={"tamper": ["logs: added /logs/verifier"]})
    assert rollout_metrics(trajs)["reward/tamper_suspect_rate"] == 0.25


def test_control_runs_are_counted_per_step_and_flagged_tasks_recorded(tmp_path):
    trajs = make_trajectories(num_groups=2, group_size=2, seed=0)
    trajs[0] = trajs[0].model_copy(update={"failure_class": "zero", "outcome": "no_reward_file", "blame": "attempt",
                                           "timings_s": {"control_s": 1.5}})
    trajs[1] = trajs[1].model_copy(update={"failure_class": "mask", "outcome": "disk_limit", "blame": "infrastructure",
                                           "timings_s": {"control_s": 2.0}, "detail": "the control failed too"})
    m = rollout_metrics(trajs)
    assert (m["rollout/zeroed_by_control"], m["rollout/masked_by_control"], m["rollout/control_s"]) == (1.0, 1.0, 3.5)
    assert record_flagged(tmp_path, 7, trajs) == 1 and record_flagged(tmp_path, 8, trajs[2:]) == 0
    [line] = (tmp_path / FLAGGED_FILE).read_text().splitlines()
    assert json.loads(line) == {"global_step": 7, "task": trajs[1].task_name, "group_id": trajs[1].group_id,
                                "sample_index": trajs[1].sample_index, "outcome": "disk_limit",
                                "detail": "the control failed too"}


def test_sink_writes_one_record_per_step_with_global_step_and_tensorboard(tmp_path):
    sink = MetricsSink(tmp_path, tensorboard=True)
    sink.log(1, {"reward/avg_raw_reward": 0.5, "grad_norm": 1.0})
    sink.log(2, {"reward/avg_raw_reward": 0.75, "grad_norm": 0.5})
    sink.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in records] == [1, 2]
    assert records[1]["reward/avg_raw_reward"] == 0.75
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_tensorboard_gets_the_config_as_text_and_hparams_and_a_few_episodes(tmp_path, caplog):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    caplog.set_level("INFO", logger="swerl.trainer.tracking.metrics")
    sink = MetricsSink(tmp_path, tensorboard=True, config={"algorithm": {"use_tis": True, "lr": 1e-6}, "names": ["a"]})
    trajs = make_trajectories(num_groups=2, group_size=3)
    trajs[0] = trajs[0].model_copy(update={"outcome": "passed", "reward": 1.0})
    trajs[1] = trajs[1].model_copy(update={"outcome": "failed", "reward": 0.0})
    sink.log_episodes(1, trajs, [0.5] * len(trajs))
    sink.close()
    assert f"TensorBoard: writing {tmp_path / 'tensorboard'}; view with `tensorboard --logdir" in caplog.text
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["tensors"])
    assert {"config/text_summary", "episodes/text_summary"} <= tags
    assert "_hparams_/experiment" in events.PluginTagToContent("hparams")  # TensorBoard's HPARAMS tab
    config_text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "use_tis: true" in config_text
    (episodes,) = events.Tensors("episodes/text_summary")
    text = episodes.tensor_proto.string_val[0].decode()
    assert episodes.step == 1 and text.count("**") == 2 * 3  # three episodes, each title in bold
    assert text.index("outcome passed") < text.index("outcome failed")  # the passed one first


def test_trajectory_dump_has_every_trajectory_with_its_advantage(tmp_path):
    trajs = make_trajectories(num_groups=1, group_size=3)
    path = dump_trajectories(tmp_path, 4, trajs, [0.5, -0.25, -0.25])
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert path.name == "step_4.jsonl" and len(rows) == 3
    assert rows[1]["advantage"] == -0.25 and rows[1]["response_ids"] == trajs[1].response_ids


def test_response_lengths_count_generated_tokens_of_masked_rows():
    # A context overflow is a mask-class row: no trainable token, but the policy generated 40
    # ids, the longest episode of the batch. It must not enter the length figures as 0.
    trajs = make_trajectories(num_groups=1, group_size=3, seed=0)
    trajs = [t.model_copy(update={"num_policy_tokens": sum(t.loss_mask)}) for t in trajs]
    gen = [sum(t.loss_mask) for t in trajs]
    overflow = trajs[0].model_copy(update={
        "loss_mask": [0] * len(trajs[0].response_ids), "num_generated_tokens": 0, "num_policy_tokens": 40,
        "failure_class": "mask", "outcome": "context_overflow", "end_reason": "context_overflow"})
    m = rollout_metrics([overflow, *trajs[1:]])
    lengths = [40, *gen[1:]]
    assert m["response_length/mean"] == pytest.approx(sum(lengths) / 3)
    assert m["response_length/max"] == 40
    rows = [overflow, *trajs[1:]]
    zero = [n for n, t in zip(lengths, rows) if effective_reward(t) <= 0]  # the overflow scores 0
    assert m["response_length/reward_zero_mean"] == pytest.approx(sum(zero) / len(zero))
    assert m["response_length/masked_mean"] == 40 and m["response_length/masked_rows"] == 1
    assert m["tokens/generated"] == sum(lengths)
    assert m["tokens/trainable"] == sum(gen[1:])
