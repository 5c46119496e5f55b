""""Did it learn?": the training reward's change against its noise band, the held-out change
from step 0, the groups with signal, and the next commands; in the report and after train."""

from __future__ import annotations

import json

import numpy as np

from swerl.report.report import build_report
from swerl.report.runs import load_run
from swerl.report.verdict import run_verdict

from ._synthetic import make_run, random_passes

CONFIG = {"algorithm": {"n_samples_per_prompt": 4}}


def _with_counts(run_dir, episodes: int, flat_groups: list[float]) -> None:
    """Add what train logs beside the reward: episodes per step, groups without variance."""
    path = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record, flat in zip(records, flat_groups):
        record.update({"reward/num_trajectories": float(episodes), "advantage/zero_variance_groups": flat,
                       "advantage/below_min_groups": 0.0})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_clear_rise_with_a_held_out_gain_is_called_one(tmp_path):
    rng = np.random.default_rng(0)
    rates = np.linspace(0.05, 0.5, 40)
    evals = {0: random_passes(rates, 4, rng), 10: random_passes(np.minimum(rates + 0.45, 1.0), 4, rng)}
    run_dir = make_run(tmp_path / "run", CONFIG, [0.1 + 0.06 * s for s in range(10)], evals)
    _with_counts(run_dir, 64, [10.0] * 5 + [4.0] * 5)
    verdict = run_verdict(load_run(run_dir))
    assert verdict.headline.startswith("Held-out pass@1 rose from step 0 to step 10; the training reward rose")
    assert verdict.lines[0].startswith("training reward: trailing EMA (span 5) ")
    assert "(10 steps, 64 episodes each)" in verdict.lines[0]
    assert verdict.lines[1].startswith("held-out: ") and "pass@1" in verdict.lines[1]
    assert verdict.lines[-1].startswith("groups with signal (rewards not all equal, so a gradient): 90 of 160 (56%)")
    assert verdict.next_commands[1] == f"swerl view {run_dir} --out {run_dir / 'view.html'}"


def test_noise_is_called_noise_and_the_report_opens_with_the_verdict(tmp_path):
    run_dir = make_run(tmp_path / "run", CONFIG, [0.125, 0.25, 0.1875], {})
    _with_counts(run_dir, 16, [3.0, 2.0, 2.0])
    verdict = run_verdict(load_run(run_dir))
    assert verdict.headline.startswith("No change beyond sampling noise yet")
    assert "held-out: no evaluation before and after training" in verdict.lines[1]
    page = build_report([run_dir], tmp_path / "report.html").html_path.read_text()
    assert page.index("<h2>Did it learn?</h2>") < page.index("<table>")
    assert "No change beyond sampling noise yet" in page and f"swerl view {run_dir}" in page


def test_train_ends_with_the_verdict_and_the_next_commands(tmp_path):
    from rich.console import Console

    from swerl.cli.common import swerl_program
    from swerl.cli.train import _print_verdict

    run_dir = make_run(tmp_path / "run", CONFIG, [0.125, 0.25, 0.1875], {})
    console = Console(record=True, width=300)
    _print_verdict(console, run_dir)
    text = console.export_text()
    assert text.startswith("Did it learn? No change beyond sampling noise yet")
    assert f"next:\n  {swerl_program()} report {run_dir} --out {run_dir / 'report.html'}\n" in text


def test_the_printed_commands_call_swerl_as_this_shell_can(tmp_path, monkeypatch):
    """``next:`` and the resume line name swerl so that they run as printed: ``swerl`` only when
    that name on PATH is this program, else the script's path (a venv not activated), else
    ``python -m swerl.cli``."""
    from swerl.cli.common import swerl_program

    script = tmp_path / "venv" / "bin" / "swerl"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", [str(script), "train"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert swerl_program() == "venv/bin/swerl"  # relative to the working folder
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert swerl_program() == "swerl"
    monkeypatch.setattr("sys.argv", ["-m", "train"])
    assert swerl_program().endswith(" -m swerl.cli")


def test_with_dynamic_sampling_the_groups_with_signal_are_the_kept_of_the_drawn(tmp_path):
    """New-user finding: a demo step that drew 6 groups and kept 2 read "6/6"; the trained rows hold
    only the kept groups, so counting groups from them (minus flat ones among them) saw no flat group."""
    run_dir = make_run(tmp_path / "run", CONFIG, [0.08, 0.09, 0.17, 0.21], {})
    _with_counts(run_dir, 8, [0.0] * 4)
    path = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record, (kept, dropped) in zip(records, [(2, 4), (2, 6), (2, 4), (4, 2)]):
        record.update({"dynamic_sampling/groups_kept": float(kept), "dynamic_sampling/groups_dropped": float(dropped)})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    line = run_verdict(load_run(run_dir)).lines[-1]
    assert line.startswith("groups with signal (rewards not all equal, so a gradient): 10 of 26 (38%)"), line


def test_the_next_eval_names_a_generated_family_s_held_out_split_and_the_baseline(tmp_path):
    family = tmp_path / "family"
    for split in ("train", "heldout-instance", "heldout-template"):
        (family / split).mkdir(parents=True)
    run_dir = make_run(tmp_path / "run", {**CONFIG, "data": {"tasks": str(family / "train")}}, [0.1, 0.2], {})
    commands = run_verdict(load_run(run_dir)).next_commands
    assert commands[2].startswith(f"swerl eval {family / 'heldout-instance'} --from-run {run_dir} -k 4 --out ")
    assert f"--from-run {run_dir} --step 0 -k 4" in commands[3] and commands[4].startswith("swerl compare ")
    bare = make_run(tmp_path / "bare", CONFIG, [0.1, 0.2], {})
    assert run_verdict(load_run(bare)).next_commands[2].startswith("swerl eval TASKS --from-run")
