"""Reading the verifier's report: reward files, outcomes and failure classes (no Docker)."""

from __future__ import annotations

import pytest

from swerl.sandbox.types import Outcome
from swerl.sandbox.runtime.verifier import parse_sections, read_reward, verdict


def report(rc: str = "0", txt: str | None = None, js: str | None = None, tail: str = "", oom: tuple[int, int] = (0, 0)) -> str:
    out = f"\x1eoom_before\x1f{oom[0]}\n\x1erc\x1f{rc}\x1eoom_after\x1f{oom[1]}\n"
    if txt is not None:
        out += f"\x1ereward_txt\x1f{txt}"
    if js is not None:
        out += f"\x1ereward_json\x1f{js}"
    return out + f"\x1etail\x1f{tail}"


@pytest.mark.parametrize(
    ("txt", "js", "outcome", "reward"),
    [
        ("1\n", None, Outcome.passed, 1.0),
        ("0\n", None, Outcome.failed, 0.0),
        ("0.25", None, Outcome.failed, 0.25),
        (None, '{"reward": 1.0, "tests": 3}', Outcome.passed, 1.0),
        ("", '{"reward": 0.0}', Outcome.failed, 0.0),
        ("nan\n", None, Outcome.bad_reward, 0.0),
        ("1.5\n", None, Outcome.bad_reward, 0.0),
        ("-1\n", None, Outcome.bad_reward, 0.0),
        ("inf", None, Outcome.bad_reward, 0.0),
        ("yes", None, Outcome.bad_reward, 0.0),
        (None, '{"score": 1}', Outcome.bad_reward, 0.0),
        (None, "[1]", Outcome.bad_reward, 0.0),
        (None, '{"reward": NaN}', Outcome.bad_reward, 0.0),
        ("", None, Outcome.no_reward_file, 0.0),
        ("  \n", "", Outcome.no_reward_file, 0.0),
        (None, None, Outcome.no_reward_file, 0.0),
    ],
)
def test_reward_files_map_to_outcomes(txt, js, outcome, reward):
    result = verdict(parse_sections(report(txt=txt, js=js)), timed_out=False, timeout_s=10, duration_s=1.0)
    assert (result.outcome, result.reward) == (outcome, reward)
    assert result.failure_class == outcome.failure_class


def test_reward_txt_wins_over_reward_json():
    problem, reward, _ = read_reward(parse_sections(report(txt="0", js='{"reward": 1}')))
    assert problem is None and reward == 0.0


def test_timeout_is_verifier_timeout_with_reward_zero_even_if_a_reward_was_written():
    result = verdict(parse_sections(report(rc="137", txt="1")), timed_out=False, timeout_s=3, duration_s=3.01)
    assert result.outcome is Outcome.verifier_timeout and result.reward == 0.0
    assert result.failure_class == "zero"


def test_a_verifier_killed_before_the_deadline_leaves_no_trustworthy_reward():
    """test.sh killed by a signal (exit 128 + N) before its deadline did not finish: whatever reward
    file is there (on a kernel or runtime without Landlock, the code under test can kill the judge
    and write 1) is not its verdict. bad_reward, so a control run decides the class; an OOM kill is
    oom; an ordinary non-zero exit keeps its reward."""
    for rc, txt in (("137", "0"), ("137", "1"), ("143", "1"), ("129", "1")):
        result = verdict(parse_sections(report(rc=rc, txt=txt)), timed_out=False, timeout_s=30, duration_s=2.0)
        assert (result.outcome, result.reward, result.failure_class) == (Outcome.bad_reward, 0.0, "mask"), rc
        assert f"killed by signal {int(rc) - 128}" in result.detail
    oom = verdict(parse_sections(report(rc="137", txt="1", oom=(0, 1))), False, 30, 2.0)
    assert (oom.outcome, oom.failure_class) == (Outcome.oom, "zero")
    for rc in ("0", "1", "2", "128", "255"):  # exits of its own
        assert verdict(parse_sections(report(rc=rc, txt="1")), False, 30, 2.0).outcome is Outcome.passed, rc


def test_oom_kill_during_tests_is_oom_unless_the_tests_passed():
    failed = verdict(parse_sections(report(txt="0", oom=(0, 1))), False, 10, 1.0)
    assert failed.outcome is Outcome.oom and failed.reward == 0.0 and failed.failure_class == "zero"
    passed = verdict(parse_sections(report(txt="1", oom=(2, 3))), False, 10, 1.0)
    assert passed.outcome is Outcome.passed
    earlier = verdict(parse_sections(report(txt="0", oom=(1, 1))), False, 10, 1.0)
    assert earlier.outcome is Outcome.failed  # an OOM during the agent's turn is not the verifier's


def test_reward_json_up_to_one_mib_is_read_and_larger_is_bad_reward():
    padding = "x" * ((1 << 20) - 40)
    big = '{"reward": 1.0, "pad": "' + padding + '"}'
    assert len(big) <= 1 << 20
    assert verdict(parse_sections(report(js=big)), False, 10, 1.0).outcome is Outcome.passed
    huge = '{"reward": 1.0, "pad": "' + padding + 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"}'
    result = verdict(parse_sections(report(js=huge)), False, 10, 1.0)
    assert result.outcome is Outcome.bad_reward and "over 1048576 bytes" in result.detail


def test_tail_is_kept_verbatim_even_if_it_contains_section_markers():
    text = "line\x1erc\x1f999 \ufffd"
    sections = parse_sections(report(txt="1", tail=text))
    assert sections["tail"] == text and sections["rc"] == "0"


@pytest.mark.parametrize("outcome", list(Outcome))
def test_every_outcome_has_a_failure_class_from_the_spec(outcome):
    expected = {
        "passed": "none", "failed": "none", "verifier_timeout": "zero", "oom": "zero",
        "no_reward_file": "mask", "bad_reward": "mask", "build_error": "mask",
        "start_error": "mask", "daemon_error": "mask", "disk_limit": "mask", "copy_out_error": "mask",
        "trial_error": "mask", "healthcheck_failed": "mask",
    }
    assert outcome.failure_class == expected[outcome.value]


def test_rights_taken_by_the_tests_are_reported_from_the_modes_found():
    from swerl.sandbox.runtime.verifier import rights_taken, verdict

    assert rights_taken("/logs=755 /logs/verifier=755 /logs/verifier/reward.txt=644 ") == ""
    taken = "/logs=755 /logs/verifier=0 /logs/verifier/reward.txt=200 "
    assert rights_taken(taken) == "/logs/verifier=0 /logs/verifier/reward.txt=200"
    result = verdict(parse_sections(report(txt="0")) | {"rights": taken}, False, 60.0, 1.0)
    assert (result.outcome, result.reward) == (Outcome.failed, 0.0)
    assert "rights the tests took were restored" in result.detail and "/logs/verifier=0" in result.detail
