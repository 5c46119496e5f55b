"""``swerl compare`` on synthetic run folders with known per-task outcomes: a real difference is
found (CI above 0, McNemar p < 0.05), identical arms are indistinguishable, evaluations that do
not pair are refused naming the difference (exit 2) unless --unpaired, and seed replicas are one
arm with a CI across replicas."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from swerl.cli import app
from swerl.report.compare import Estimate, PairingError, Verdict, compare_runs, verdict_text
from swerl.selection import ema

from ._synthetic import make_run, random_passes

TASKS = 60


def _rates(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.05, 0.5, TASKS)


def _arm(root, name, seed, rate, rng, *, eval_seed=0, samples=4, before=None, rewards=None):
    config = {"seed": seed, "algorithm": {"loss_reduction": name}}
    evals = {20: random_passes(rate, samples, rng)}
    if before is not None:
        evals[0] = before
    rewards = rewards if rewards is not None else list(rng.uniform(0, 1, 20))
    return make_run(root / name / f"seed{seed}", config, rewards, evals, eval_seed=eval_seed)


def test_a_known_difference_is_found_with_its_ci_and_mcnemar(tmp_path):
    rng = np.random.default_rng(1)
    rate = _rates()
    a = _arm(tmp_path, "seqmean", 0, rate, rng)
    b = _arm(tmp_path, "seqnorm", 0, np.minimum(rate + 0.4, 1.0), rng)
    cmp = compare_runs([a, b])
    pass1 = cmp.verdicts[0]
    assert pass1.metric == "pass@1" and pass1.a == "seqmean" and pass1.b == "seqnorm" and cmp.paired
    assert 0.3 < pass1.diff.mean < 0.5 and pass1.diff.low > 0 and pass1.p_value < 0.05
    assert pass1.only_b > pass1.only_a
    assert pass1.text.startswith("seqnorm > seqmean: better at 95%: pass@1 +0.") and "McNemar p" in pass1.text
    # The paired difference equals the mean of per-task pass-rate differences, recomputed here.
    per_task = {}
    for path, sign in ((a, -1), (b, 1)):
        for line in (path / "eval" / "step_20.jsonl").read_text().splitlines():
            r = json.loads(line)
            per_task.setdefault(r["task"], 0.0)
            per_task[r["task"]] += sign * r["passed"] / 4
    assert pass1.diff.mean == pytest.approx(np.mean(list(per_task.values())))
    assert [v.metric for v in cmp.verdicts] == ["pass@1", "pass@4"]


def test_identical_arms_are_indistinguishable(tmp_path):
    rng = np.random.default_rng(2)
    passes = random_passes(_rates(), 4, rng)
    a = make_run(tmp_path / "a", {"seed": 0, "x": 1}, [0.5] * 20, {20: passes})
    b = make_run(tmp_path / "b", {"seed": 0, "x": 2}, [0.5] * 20, {20: passes})
    cmp = compare_runs([a, b])
    for v in cmp.verdicts:
        assert (v.diff.mean, v.diff.low, v.diff.high, v.p_value) == (0.0, 0.0, 0.0, 1.0)
        assert "indistinguishable at 95%" in v.text
    assert cmp.verdicts[0].text == "b vs a: indistinguishable at 95%: pass@1 diff +0.00 [0.00, 0.00], McNemar p = 1.00"


def test_mcnemar_is_the_exact_binomial_on_discordant_tasks():
    from swerl.report.stats import mcnemar_exact

    a = np.array([True] * 10 + [False] * 2 + [True] * 5 + [False] * 7)
    b = np.array([False] * 10 + [True] * 2 + [True] * 5 + [False] * 7)
    test = mcnemar_exact(a, b)
    assert (test.only_a, test.only_b) == (10, 2)
    assert test.p_value == pytest.approx(2 * (1 + 12 + 66) / 4096)  # 2 * P(X <= 2), X ~ Bin(12, 1/2)


def test_unpaired_evaluations_are_refused_naming_the_difference(tmp_path):
    rng = np.random.default_rng(3)
    rate = _rates()
    a = _arm(tmp_path, "a", 0, rate, rng)
    other_seeds = _arm(tmp_path, "b", 0, rate, rng, eval_seed=1)
    other_samples = _arm(tmp_path, "c", 0, rate, rng, samples=2)
    other_tasks = _arm(tmp_path, "d", 0, rate[:50], rng)
    with pytest.raises(PairingError, match=r"eval seeds differ on 240 of 240 samples .*same eval.seed"):
        compare_runs([a, other_seeds])
    with pytest.raises(PairingError, match="eval samples differ: .* 4 samples per task, .* 2"):
        compare_runs([a, other_samples])
    with pytest.raises(PairingError, match=r"eval tasks differ: .* lacks 10 of its tasks \(task-050"):
        compare_runs([a, other_tasks])
    result = CliRunner().invoke(app, ["compare", str(a), str(other_seeds)])
    assert isinstance(result.exception, PairingError) and result.exception.exit_code == 2
    assert "--unpaired" in str(result.exception)
    cmp = compare_runs([a, other_tasks], unpaired=True)
    assert not cmp.paired and cmp.notes[0].startswith("unpaired: eval tasks differ")
    assert all("(unpaired)" in v.text and v.test == "Fisher" for v in cmp.verdicts)


def test_seed_replicas_are_one_arm_with_a_ci_across_replicas(tmp_path):
    rng = np.random.default_rng(4)
    rate = _rates()
    before = random_passes(rate, 4, rng)
    rewards = {s: list(rng.uniform(0, 1, 20)) for s in range(3)}
    for s in range(3):
        _arm(tmp_path, "seqmean", s, rate, rng, before=before, rewards=rewards[s])
        _arm(tmp_path, "seqnorm", s, np.minimum(rate + 0.3, 1.0), rng, before=before)
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "seqmean"), str(tmp_path / "seqnorm"),
                                      "--json", str(tmp_path / "cmp.json")])
    assert result.exit_code == 0, result.output
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    arm = cmp["arms"][0]
    assert [a["arm"] for a in cmp["arms"]] == ["seqmean", "seqnorm"] and len(arm["run_dirs"]) == 3
    finals = [ema(rewards[s], 5)[-1] for s in range(3)]
    half = stats.t.ppf(0.975, 2) * stats.sem(finals)
    assert arm["final_ema"]["mean"] == pytest.approx(np.mean(finals))
    assert arm["final_ema"]["low"] == pytest.approx(max(np.mean(finals) - half, 0.0))
    assert len(arm["selected_steps"]) == 3 and arm["eval"]["pass@1"]["n"] == 3
    assert cmp["verdicts"][0]["text"].startswith("seqnorm > seqmean: better at 95%: pass@1")
    # Both arms start from the same step-0 evaluation; each arm is also tested against it.
    assert [v["a"] for v in cmp["learning"]] == ["seqmean@0", "seqmean@0", "seqnorm@0", "seqnorm@0"]
    assert "seqnorm > seqmean: better at 95%: pass@1" in result.output and "arms (mean [CI] across replicas)" in result.output


def test_the_report_shows_the_comparison_and_groups_replicas(tmp_path):
    from swerl.report.report import build_report

    rng = np.random.default_rng(5)
    rate = _rates()
    for s in range(2):
        _arm(tmp_path, "seqmean", s, rate, rng)
        _arm(tmp_path, "seqnorm", s, np.minimum(rate + 0.4, 1.0), rng)
    result = build_report([tmp_path / "seqmean", tmp_path / "seqnorm"], tmp_path / "out" / "r.html")
    page = result.html_path.read_text()
    assert "Do the arms differ?" in page and "seqnorm &gt; seqmean: better at 95%: pass@1" in page
    assert [row["arm"] for row in result.arms] == [
        "loss_reduction=seqmean, seed=0", "loss_reduction=seqmean, seed=1",
        "loss_reduction=seqnorm, seed=0", "loss_reduction=seqnorm, seed=1"]
    shutil.rmtree(tmp_path / "seqnorm")
    one = build_report([tmp_path / "seqmean"], tmp_path / "out" / "one.html")
    assert "Do the arms differ?" not in one.html_path.read_text()


@pytest.mark.parametrize(("mean", "low", "high", "p", "expected"), [
    (0.08, 0.02, 0.14, 0.01, "new > old: better at 95%: pass@1 +0.08 [0.02, 0.14], McNemar p = 0.010"),
    (-0.08, -0.14, -0.02, 0.01, "old > new: better at 95%: pass@1 +0.08 [0.02, 0.14], McNemar p = 0.010"),
    (0.08, 0.01, 0.14, 0.09, "new > old: pass@1 +0.08 [0.01, 0.14], McNemar p = 0.090 (not significant)"),
    (0.08, -0.05, 0.14, 0.5, "new vs old: indistinguishable at 95%: pass@1 diff +0.08 [-0.05, 0.14], McNemar p = 0.50"),
])
def test_a_verdict_says_better_only_when_the_ci_and_the_test_agree(mean, low, high, p, expected):
    verdict = Verdict(metric="pass@1", a="old", b="new", diff=Estimate(mean=mean, low=low, high=high, n=40),
                      test="McNemar", p_value=p, paired=True, text="")
    assert verdict_text(verdict, 0.95) == expected
