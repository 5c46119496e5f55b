"""A summarized episode's token sequences as training rows: one row each, the episode's
advantage on every one, loss masks over generated ids only, mini-batches cut between episodes."""

from __future__ import annotations

import torch

from swerl.agent.trajectory import Segment, Trajectory
from swerl.trainer.step.batch import collate, mini_batches, row_from_trajectory, rows_from_trajectory


def summarized(failure_class: str = "none") -> Trajectory:
    """Agent conversation, summary + answers, questions, then the last agent conversation."""
    segments = [
        Segment(kind="agent", prompt_ids=[1, 2], response_ids=[3, 4, 5], loss_mask=[1, 0, 1],
                rollout_logprobs=[-0.1, 0.0, -0.2]),
        Segment(kind="summary", prompt_ids=[1, 2, 6], response_ids=[7, 8, 9], loss_mask=[1, 0, 1],
                rollout_logprobs=[-0.3, 0.0, -0.4]),
        Segment(kind="questions", prompt_ids=[10], response_ids=[11], loss_mask=[1], rollout_logprobs=None),
    ]
    return Trajectory(task_name="t", group_id="g", prompt_ids=[1, 12], response_ids=[13, 14], loss_mask=[1, 0],
                      rollout_logprobs=[-0.5, 0.0], segments=segments, failure_class=failure_class, reward=1.0)


def test_each_token_sequence_is_a_row_with_the_episode_advantage():
    rows = rows_from_trajectory(summarized(), 0.5, episode_index=7)
    assert [r.prompt_ids.tolist() for r in rows] == [[1, 2], [1, 2, 6], [10], [1, 12]]
    assert [r.loss_mask.tolist() for r in rows] == [[True, False, True], [True, False, True], [True], [True, False]]
    assert [r.advantage for r in rows] == [0.5] * 4 and [r.episode_index for r in rows] == [7] * 4
    assert rows[2].rollout_logprobs is None and torch.equal(rows[1].rollout_logprobs, torch.tensor([-0.3, 0.0, -0.4]))
    # collated, every row's advantage sits on its own generated tokens only
    mb = collate(rows)
    assert mb.advantages[mb.loss_mask].tolist() == [0.5] * 6


def test_masked_episode_keeps_its_segments_but_trains_none():
    rows = rows_from_trajectory(summarized("mask"), 0.0)
    assert len(rows) == 4 and sum(r.num_trainable_tokens for r in rows) == 0


def test_row_from_trajectory_is_the_last_sequence():
    row = row_from_trajectory(summarized(), 1.0)
    assert row.prompt_ids.tolist() == [1, 12] and row.loss_mask.tolist() == [True, False]


def test_mini_batches_never_split_an_episode():
    one = rows_from_trajectory(summarized(), 1.0, episode_index=0)
    plain = [rows_from_trajectory(Trajectory(task_name="t", group_id="g", prompt_ids=[1]), 1.0, episode_index=i)[0]
             for i in (1, 2)]
    minis = mini_batches([*one, *plain], 2)
    assert [len(m) for m in minis] == [5, 1]
    assert [{r.episode_index for r in m} for m in minis] == [{0, 1}, {2}]


def test_rows_without_episode_index_are_episodes_of_their_own():
    rows = [row_from_trajectory(Trajectory(task_name="t", group_id="g", prompt_ids=[1]), 1.0) for _ in range(5)]
    assert [len(m) for m in mini_batches(rows, 2)] == [2, 2, 1]
