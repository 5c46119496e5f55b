"""``rollouts.dynamic.fill_batch`` with the real estimator on hand-made groups: what is kept and
dropped, how many prompts each extra round asks for, and the bound on rounds (no Docker; the loop
on real sandboxes is ``test_dynamic_sampling.py``)."""

from __future__ import annotations

from swerl.agent.trajectory import Trajectory
from swerl.rl.config import AlgorithmConfig
from swerl.trainer.rollouts.dynamic import fill_batch

ALGO = AlgorithmConfig.model_validate({"n_samples_per_prompt": 4, "min_group_size": 3,
                                       "dynamic_sampling": {"enabled": True, "max_extra_rounds": 3}})


def group(name: str, rewards: list[float], masked: tuple[int, ...] = ()) -> list[Trajectory]:
    return [Trajectory(task_name=name, group_id=name, sample_index=i, prompt_ids=[1], reward=r,
                       failure_class="mask" if i in masked else "none", exclude_from_baseline=i in masked)
            for i, r in enumerate(rewards)]


class Rounds:
    """Extra rounds served from a queue of groups; records how many prompts each round asked for."""

    def __init__(self, queue: list[list[Trajectory]]) -> None:
        self.queue, self.asked = queue, []

    def __call__(self, round_index: int, count: int) -> list[Trajectory]:
        self.asked.append((round_index, count))
        taken, self.queue = self.queue[:count], self.queue[count:]
        return [t for g in taken for t in g]


def test_groups_without_signal_are_replaced_by_the_missing_count_of_next_prompts():
    first = group("a", [1, 0, 0, 1]) + group("b", [1, 1, 1, 1]) + group("c", [0, 1, 0, 9], masked=(3,))
    # c: three usable rows that differ (signal); b: all equal (dropped)
    more = Rounds([group("d", [0, 0, 0, 0]), group("e", [0.2, 0, 0, 0]), group("f", [1, 0, 1, 0])])
    filled = fill_batch(ALGO, 3, first, more)
    assert more.asked == [(1, 1), (2, 1)]  # d (no signal), then e
    assert [t.group_id for t in filled.trajectories][::4] == ["a", "c", "e"]
    assert [t.group_id for t in filled.generated][::4] == ["a", "b", "c", "d", "e"]
    assert filled.metrics == {
        "dynamic_sampling/groups_kept": 3.0, "dynamic_sampling/groups_dropped": 2.0, "dynamic_sampling/rounds": 2.0,
        "dynamic_sampling/batch_filled": 1.0, "dynamic_sampling/prompts_drawn": 5.0,
        "dynamic_sampling/trained_avg_raw_reward": (2 + 1 + 0.2) / 12,  # the masked 9 scores 0
    }


def test_masked_rows_cannot_make_signal_and_the_rounds_are_bounded():
    only_mask_differs = group("m", [1, 1, 1, 0], masked=(3,))
    too_few = group("s", [1, 0, 0, 0], masked=(0, 1))  # two usable rows < min_group_size 3
    more = Rounds([group(f"x{i}", [0, 0, 0, 0]) for i in range(10)])
    filled = fill_batch(ALGO, 2, only_mask_differs + too_few, more)
    assert more.asked == [(1, 2), (2, 2), (3, 2)]  # max_extra_rounds, then stop
    assert filled.metrics["dynamic_sampling/rounds"] == 3.0 and filled.metrics["dynamic_sampling/batch_filled"] == 0.0
    assert filled.metrics["dynamic_sampling/groups_dropped"] == 8.0 and filled.metrics["dynamic_sampling/groups_kept"] == 0
    assert filled.trajectories == only_mask_differs + too_few  # nothing kept: round 0 trains, all A = 0
    assert len(filled.generated) == 8 * 4


def test_a_full_first_round_draws_nothing():
    more = Rounds([])
    filled = fill_batch(ALGO, 1, group("a", [1, 0, 0, 0]), more)
    assert more.asked == [] and filled.metrics["dynamic_sampling/rounds"] == 0.0
