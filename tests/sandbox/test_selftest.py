"""Every misbehaving fixture task in ONE concurrent batch: each gets the right outcome and
reward 0 unless passed, the well-behaved task is unaffected, and nothing is left behind."""

from __future__ import annotations

import pytest

from swerl.sandbox import Outcome, SandboxConfig
from swerl.sandbox.selftest import run_sandbox_test

from ._support import FIXTURES, containers_of, fixture_task, run

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# (task, attempt) -> accepted outcomes
EXPECTED = {
    ("add", "oracle"): {Outcome.passed},
    ("add", "null"): {Outcome.failed},
    ("loop_forever", "null"): {Outcome.verifier_timeout},
    ("noisy_output", "null"): {Outcome.failed},
    ("memory_hog", "null"): {Outcome.oom, Outcome.failed},
    ("fork_bomb", "null"): {Outcome.failed},
    ("network_probe", "null"): {Outcome.failed},
    ("planted_reward", "oracle"): {Outcome.failed},
    ("planted_reward", "null"): {Outcome.failed},
    ("no_tests_collected", "null"): {Outcome.failed},
    ("reward_nan", "null"): {Outcome.bad_reward},
    ("reward_too_big", "null"): {Outcome.bad_reward},
    ("reward_negative", "null"): {Outcome.bad_reward},
    ("reward_empty", "null"): {Outcome.no_reward_file},
    ("no_reward_file", "null"): {Outcome.no_reward_file},
    ("reward_json", "null"): {Outcome.passed},
}


def test_misbehaving_tasks_in_one_batch(docker_client):
    tasks = [fixture_task(path.name) for path in sorted(FIXTURES.iterdir())]
    report = run(run_sandbox_test(tasks, SandboxConfig(concurrency=2)))
    got = {(r.task, r.attempt): r for r in report.records}
    assert set(got) == set(EXPECTED)
    for key, accepted in EXPECTED.items():
        record = got[key]
        assert record.outcome in accepted, f"{key}: {record.outcome.value} ({record.detail})"
        assert record.failure_class == record.outcome.failure_class
        if record.outcome is not Outcome.passed:
            assert record.reward == 0.0, key
        else:
            assert record.reward == 1.0, key
        assert record.timings.cleanup_s > 0, f"{key}: container removal not recorded"
    # Only `add` behaves as sandbox-test demands (oracle 1, null 0).
    assert {b.task for b in report.broken} == {t.name for t in tasks} - {"add"}
    assert "planted" not in got[("planted_reward", "oracle")].detail
    assert containers_of(docker_client, report.run_id) == []
