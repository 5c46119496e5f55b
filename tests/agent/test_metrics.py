from math import comb

import pytest

from swerl.agent.metrics import pass_at_k, summarize
from swerl.agent.trajectory import Trajectory


def test_pass_at_k_matches_hand_computed_values():
    # n=4, c=1: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5; pass@4 = 1.
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 4) == pytest.approx(1.0)
    # n=10, c=3, k=5: 1 - C(7,5)/C(10,5) = 1 - 21/252.
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0


def test_pass_at_1_is_the_fraction_passed():
    for n in range(1, 8):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == pytest.approx(c / n)
            assert pass_at_k(n, c, n) == (1.0 if c else 0.0)
            assert pass_at_k(n, c, 2 if n >= 2 else 1) == pytest.approx(
                1 - comb(n - c, min(2, n)) / comb(n, min(2, n))
            )


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(3, 1, 4)


def _traj(group: str, passed: bool, turns: int = 1) -> Trajectory:
    return Trajectory(task_name=group, group_id=group, prompt_ids=[1], outcome="passed" if passed else "failed",
                      reward=1.0 if passed else 0.0, num_turns=turns, end_reason="completed")


def test_summary_averages_pass_at_k_over_tasks():
    trajs = [_traj("a", p) for p in (True, False, False, False)] + [_traj("b", p) for p in (True, True, False, False)]
    summary = summarize(trajs, ks=[1, 4, 8])
    assert summary["pass@1"] == pytest.approx((0.25 + 0.5) / 2)
    assert summary["pass@4"] == pytest.approx(1.0)
    assert "pass@8" not in summary  # larger than the groups
    assert summary["reward/mean"] == pytest.approx(3 / 8)
    assert summary["outcomes"] == {"failed": 5, "passed": 3}
    assert summary["num_tasks"] == 2


def test_masked_samples_leave_the_pass_at_k_denominators():
    masked = Trajectory(task_name="a", group_id="a", prompt_ids=[1], outcome="daemon_error", failure_class="mask")
    # Task a: 1 pass, 1 fail, 2 masked -> n = 2; task b: every sample masked -> in no denominator.
    trajs = [_traj("a", True), _traj("a", False), masked, masked,
             *[masked.model_copy(update={"group_id": "b", "task_name": "b"})] * 4]
    summary = summarize(trajs, ks=[1, 2, 4])
    assert summary["pass@1"] == pytest.approx(0.5)  # 1 of 2 judged samples, not 1 of 4
    assert summary["pass@2"] == pytest.approx(1.0)
    assert "pass@4" not in summary  # no task has 4 judged samples
    assert summary["tasks_scored"] == {"pass@1": 1, "pass@2": 1}
    assert summary["num_masked"] == 6 and summary["num_tasks_all_masked"] == 1 and summary["num_tasks"] == 2
