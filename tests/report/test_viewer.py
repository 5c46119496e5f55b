"""The HTML viewer in headless Chromium: every episode of every step, filters and sorting set in
the URL fragment, outcome colours, and one episode read as turns (commands, outputs, model
text), with its verifier tail and token facts."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from swerl.agent.trajectory import Trajectory
from swerl.report.view import load_episodes
from swerl.report.viewer import write_html
from swerl.trainer.tracking.metrics import dump_trajectories

REPLY = json.dumps({"analysis": "The file is missing.", "plan": "Write it.",
                    "commands": [{"keystrokes": "echo MAGIC > /app/solution.py\n", "duration": 0.1}],
                    "task_complete": False})


def _traj(task: str, sample: int, reward: float, outcome: str, **extra) -> Trajectory:
    messages = [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": f"Solve {task}"},
                {"role": "assistant", "content": REPLY},
                {"role": "user", "content": "root@sandbox:/app# echo MAGIC > /app/solution.py"}]
    extra.setdefault("loss_mask", [1, 1, 0, 0])
    return Trajectory(task_name=task, group_id=f"{task}-g", sample_index=sample, prompt_ids=[1, 2],
                      response_ids=[3, 4, 5, 6], reward=reward, outcome=outcome,
                      end_reason="task_complete", num_turns=1, messages=messages, num_policy_tokens=2 + sample,
                      verifier_output_tail=f"collected 1 item\nverdict of {task} #{sample}", **extra)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("viewer") / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"agent": {"protocol": "terminus-json"}}))
    step1 = [_traj("alpha", i, float(i < 2), "passed" if i < 2 else "failed") for i in range(4)]
    step2 = [_traj("beta", 0, 1.0, "passed"), _traj("beta", 1, 0.0, "failed", hit_length_limit=True),
             _traj("beta", 2, 0.0, "bad_reward", failure_class="mask", loss_mask=[0, 0, 0, 0]),
             _traj("beta", 3, 0.0, "failed")]
    dump_trajectories(run, 1, step1, [1.0, 1.0, -1.0, -1.0])
    dump_trajectories(run, 2, step2, [0.75, -0.25, 0.0, -0.25])
    return write_html(load_episodes(run, all_steps=True), run.parent / "view.html")


def _dom(page: Path, fragment: str) -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("chromium is not installed: apt-get install chromium (.ci/run installs it)")
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           f"--user-data-dir={page.parent / 'chromium-profile'}", "--dump-dom",
                           f"{page.as_uri()}#{fragment}"], check=True, capture_output=True, text=True, timeout=120)
    return proc.stdout


def _rows(dom: str) -> list[dict[str, str]]:
    """(class, data-id, data-outcome, cells) of each drawn episode row."""
    rows = re.findall(r'<tr class="ep ([^"]*)" data-id="(\d+)" data-outcome="([^"]*)">(.*?)</tr>', dom)
    return [{"class": c, "id": i, "outcome": o, "cells": re.findall(r"<td>(.*?)</td>", body)} for c, i, o, body in rows]


def test_the_viewer_lists_every_step_and_filters_by_outcome_and_flag(page):
    everything = _rows(_dom(page, ""))
    assert len(everything) == 8 and {r["cells"][0] for r in everything} == {"1", "2"}
    assert {r["cells"][7] for r in everything} == {"1"}  # turns: a count
    assert {r["outcome"]: r["class"] for r in everything} == {"passed": "o-passed", "failed": "o-failed",
                                                              "bad_reward": "o-other"}
    dom = _dom(page, "outcome=passed&step=1")
    passed = _rows(dom)
    assert [(r["cells"][1], r["cells"][2]) for r in passed] == [("alpha", "0"), ("alpha", "1")]
    assert "2 of 8 episodes shown: passed 2" in dom
    (tampered,) = _rows(_dom(page, "flag=tamper"))
    assert tampered["cells"][1:3] == ["beta", "2"] and "tamper" in tampered["cells"][9]


def test_the_viewer_sorts_and_shows_one_episode_as_turns(page):
    dom = _dom(page, "step=2&sort=adv&desc=1&ep=5")
    rows = _rows(dom)
    assert [r["cells"][5] for r in rows] == ["+0.7500", "0.0000", "-0.2500", "-0.2500"]
    detail = dom.split('id="detail">', 1)[1]
    # Episode 5 = beta #1: cut at the limit, its command and the screen after it, its verifier tail.
    assert "beta sample 1 (step 2)" in detail and "cut at limit" in detail
    assert "a reply was cut at max_new_tokens" in detail and "4 response tokens, 2 trained (loss_mask 1)" in detail
    assert "The file is missing." in detail and "$ echo MAGIC &gt; /app/solution.py" in detail
    assert "root@sandbox:/app#" in detail and "verdict of beta #1" in detail
