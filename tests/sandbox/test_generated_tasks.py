"""Generated pymethods tasks in real sandboxes: one task of each family, oracle reward 1 and
null attempt (the stub module left in /app) reward 0, verified in the clean room."""

from __future__ import annotations

from pathlib import Path

import pytest

from swerl.sandbox import Outcome, SandboxConfig
from swerl.sandbox.selftest import run_sandbox_test
from swerl.tasks import load_task
from swerl.tasks.generate import FAMILIES
from swerl.tasks.generate.pymethods import generate_pymethods

from ._support import run

pytestmark = pytest.mark.docker


def test_one_generated_task_per_family_passes_sandbox_test(tmp_path: Path):
    info = generate_pymethods(tmp_path / "gen", seed=0, count=60, heldout_count=6, tiers=(1, 2, 3))
    picked = {}
    for entry in info["tasks"]:
        if entry["split"] == "train":
            picked.setdefault(entry["family"], entry["name"])
    assert set(picked) == set(FAMILIES)
    tasks = [load_task(tmp_path / "gen" / "train" / name) for name in picked.values()]
    report = run(run_sandbox_test(tasks, SandboxConfig(concurrency=2)))
    trials = {(r.task, r.attempt): r for r in report.records}
    for name in picked.values():
        oracle, null = trials[(name, "oracle")], trials[(name, "null")]
        assert (oracle.outcome, oracle.reward, null.outcome, null.reward) == (Outcome.passed, 1.0, Outcome.failed, 0.0), (
            name, oracle.detail, null.detail)
        assert oracle.verification == "clean_room", name
