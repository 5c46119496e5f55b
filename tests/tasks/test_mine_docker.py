"""`swerl tasks mine` end to end in Docker: the fixture project's suite traced in a sandbox, its tasks
proven (oracle 1, null 0), and a solution that patches pytest from inside the mined code scores 0
under `agent.on_tamper: zero`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.sandbox import redteam_payloads as payloads
from swerl.sandbox.redteam import Attempt, run_attempt
from swerl.tasks.load import load_task
from swerl.tasks.mine.manifest import read_manifest

pytestmark = pytest.mark.docker

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mine_project"


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    out = tmp_path_factory.mktemp("mined") / "out"
    result = subprocess.run([sys.executable, "-m", "swerl.cli", "tasks", "mine", str(FIXTURE), str(out), "-c", "2",
                             "--json", str(out.parent / "summary.json")], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return out, json.loads((out.parent / "summary.json").read_text())


def test_mining_the_fixture_keeps_the_proven_tasks_and_names_every_drop(mined):
    out, summary = mined
    manifest = read_manifest(out)
    kept = {e.function for e in manifest.entries if e.status == "kept"}
    assert kept == {"add", "slugify", "Stack.__init__", "Stack.push", "Stack.top"}
    shout = next(e for e in manifest.entries if e.function == "shout")
    assert shout.status == "dropped" and shout.reason.startswith("tests pass on the stub")
    assert not (out / shout.task).exists()
    assert summary["kept"] == 5 and summary["on_tamper"] == "zero"
    assert summary["dropped"] == {"no test": 2, "trivial": 1, "leak": 1, "flaky": 1, "tests pass on the stub": 1}
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(
        e.task for e in manifest.entries if e.status == "kept")


def test_a_solution_that_patches_pytest_scores_zero_under_on_tamper_zero(mined):
    """The red team's patch-pytest payload, planted in the mined module itself (where the tests import it in
    their own process), is flagged by the tamper signal; `agent.on_tamper: zero` turns its reward into 0."""
    from swerl.agent.config import AgentConfig
    from swerl.agent.outcome import Verdict
    from swerl.agent.tamper import on_tamper
    from swerl.agent.trajectory import FailureClass

    out, _ = mined
    entry = next(e for e in read_manifest(out).entries if e.function == "Stack.push")
    task = load_task(out / entry.task)
    stubbed = (out / entry.task / "environment" / "app" / entry.file).read_text()
    attempt = Attempt(name="patch-pytest-in-module", kind="solution", description="patch-pytest in the mined module",
                      files={f"/app/{entry.file}": stubbed + "\n" + payloads.PATCH_PYTEST})

    async def trial():
        async with SandboxManager(SandboxConfig(concurrency=1)) as mgr:
            return await run_attempt(mgr, task, attempt)

    record = asyncio.run(trial())
    assert any(reason.startswith("test-framework") for reason in record.tamper), record.tamper
    verdict = Verdict(record.outcome.value, record.reward, FailureClass.none)
    assert on_tamper(verdict, record.tamper, AgentConfig(on_tamper="zero")).reward == 0.0
    assert on_tamper(verdict, record.tamper, AgentConfig(on_tamper="record")).reward == record.reward
