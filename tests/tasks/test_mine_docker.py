"""`swerl tasks mine` end to end in Docker: the fixture project's suite traced in a sandbox, its tasks
proven (oracle 1, null 0), a solution that patches pytest from inside the mined code scores 0
under `agent.on_tamper: zero` on an in-process task and 0 outright on an isolated one."""

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
    assert kept == {"add", "slugify", "parse_ratio", "Stack.__init__", "Stack.push", "Stack.top"}
    shout = next(e for e in manifest.entries if e.function == "shout")
    assert shout.status == "dropped" and shout.reason.startswith("tests pass on the stub")
    assert not (out / shout.task).exists()
    assert summary["kept"] == 6 and summary["on_tamper"] == "zero"
    assert summary["harness"] == {"isolated": 2, "in-process": 4}  # slugify, parse_ratio; add and the Stack methods
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


FORGE = "import pytest\n\npytest.Function.runtest = lambda self: None\n"
# An attack helper's bypasses of the blocklist the in-process rules replaced: each made a wrong
# solution of a mined task score 1 with no reason; each is planted whole (files, or commands).
IN_PROCESS_ATTEMPTS = {
    "alias-import": {"tail": 'import importlib\n\n_load = importlib.import_module\n_load("py" + "test").Function.runtest = '
                             "lambda self: None\n"},
    "exec-string": {"tail": 'exec("import py" + "test\\npy" + "test.Function.runtest = lambda self: None")\n'},
    "equal-to-anything": {"tail": "class _R(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n\n\n"
                                  "def add(a, b):\n    return _R(0)\n"},
    "latin-1-coding": {"raw": lambda stub: ("# -*- coding: latin-1 -*-\n" + stub + "\ncaf\xe9 = 1\n" + FORGE).encode("latin-1")},
    "over-the-read-cap": {"raw": lambda stub: (stub + '\n"""' + "x" * (300 << 10) + '"""\n' + FORGE).encode()},
    "module-beside-package": {"extra": {"/app/minilib.py": None}, "tail": FORGE},
    "link-to-a-text-file": {"link": True},
    # the second round: strings typing evaluates, equality that reads its argument and lies, a forged
    # report written into the runner's pipe and an exit named by a constant
    "typing-eval": {"tail": "import typing\n\n\ndef _hint(v: \"setattr(__import__('py' + 'test').Function, 'runtest', "
                            "lambda self: None)\"):\n    return v\n\n\ntyping.get_type_hints(_hint)\n"},
    "equality-reads-other": {"tail": "class _T(int):\n    def __eq__(self, other):\n        return other == other\n"
                                     "    __hash__ = int.__hash__\n\n\ndef add(a, b):\n    return _T(0)\n"},
    "forged-report-then-exit": {"tail": "import os\n\n\ndef add(a, b):\n    for name in os.listdir('/proc/self/fd'):\n"
                                        "        pass\n    getattr(os, '_exit')(0)\n"},
}


def test_in_process_bypasses_of_the_blocklist_are_flagged_and_the_oracle_is_not(mined):
    """Fails before: all of these read reward 1 with no tamper reason (so reward 1 under on_tamper: zero)."""
    import base64

    out, _ = mined
    entry = next(e for e in read_manifest(out).entries if e.function == "add")
    task = load_task(out / entry.task)
    path = f"/app/{entry.file}"
    stub = (out / entry.task / "environment" / "app" / entry.file).read_text()
    attempts = []
    for name, how in IN_PROCESS_ATTEMPTS.items():
        files, commands = {}, []
        if "tail" in how:
            files[path] = stub + "\n" + how["tail"]
        if "raw" in how:
            commands.append(f"echo {base64.b64encode(how['raw'](stub)).decode()} | base64 -d > {path}")
        for extra in how.get("extra", {}):
            files[extra] = stub
        if how.get("link"):
            files["/app/data/notes.txt"] = stub + "\n" + FORGE
            commands.append(f"rm {path} && ln -s ../data/notes.txt {path}")
        attempts.append(Attempt(name=name, kind="solution", description=name, files=files, commands=commands))
    oracle = Attempt(name="oracle", kind="solution", description="the original body",
                     files={path: (out / entry.task / "solution" / Path(entry.file).name).read_text()})

    async def trials():
        async with SandboxManager(SandboxConfig(concurrency=2)) as mgr:
            return await asyncio.gather(*(run_attempt(mgr, task, a) for a in [*attempts, oracle]))

    *records, oracle_record = asyncio.run(trials())
    assert oracle_record.reward == 1.0 and oracle_record.tamper == [], oracle_record
    for attempt, record in zip(attempts, records):
        assert record.tamper, (attempt.name, record.reward, record.detail)


# Wrong (the stub still raises) and forging from inside the module the tests reach: patch pytest so
# every test passes, and write a reward of 1 where the verifier keeps it.
FORGE_AND_REWARD = """

try:
    import pytest

    pytest.Function.runtest = lambda self: None
except Exception:
    pass
try:
    with open("/logs/verifier/reward.txt", "w") as fh:
        fh.write("1")
except Exception:
    pass
"""


def test_isolated_tasks_are_proven_and_a_solution_that_patches_pytest_scores_zero_on_them(mined):
    """The plain-value tasks (slugify, parse_ratio) use the isolated harness and passed the proof
    (oracle 1, stub 0); the same forging module scores 1 on the in-process `add` task (the control)
    and 0 on the isolated one, with no tamper policy needed."""
    out, _ = mined
    entries = {e.function: e for e in read_manifest(out).entries if e.status == "kept"}
    harness = {name: e.metadata["harness"] for name, e in entries.items()}
    assert harness == {"add": "in-process", "slugify": "isolated", "parse_ratio": "isolated",
                       "Stack.__init__": "in-process", "Stack.push": "in-process", "Stack.top": "in-process"}
    isolated, control = entries["parse_ratio"], entries["add"]
    assert (out / isolated.task / "tests" / "swerl_solution_proxy.py").is_file()
    assert not (out / isolated.task / "tests" / "repo").exists()

    def forge(entry):  # noqa: ANN001, ANN202 - an Entry -> Attempt
        stub = (out / entry.task / "environment" / "app" / entry.file).read_text()
        return Attempt(name=f"forge-{entry.function}", kind="solution", description="patch pytest, write the reward",
                       files={f"/app/{entry.file}": stub + FORGE_AND_REWARD})

    async def trials():
        async with SandboxManager(SandboxConfig(concurrency=2)) as mgr:
            return await asyncio.gather(run_attempt(mgr, load_task(out / isolated.task), forge(isolated)),
                                        run_attempt(mgr, load_task(out / control.task), forge(control)))

    on_isolated, on_control = asyncio.run(trials())
    assert on_control.reward == 1.0, on_control  # in-process, the patch forges the reward
    assert on_isolated.reward == 0.0, on_isolated


def test_the_red_teams_solution_family_plays_in_the_mined_module_and_forges_nothing(mined):
    """Fails before: the red team planted its solution payloads in /app/solution.py, which a mined
    task's tests never import, so on mined tasks it measured nothing. Now they are appended to the
    module the task names; patch-pytest then reaches pytest (reward 1 as read) but is flagged, and a
    mined task trains under ``agent.on_tamper: zero``, so no attempt forges it."""
    from swerl.sandbox.redteam import CATALOGUE, PREFIX
    from swerl.sandbox.selftest import run_sandbox_test

    out, _ = mined
    entry = next(e for e in read_manifest(out).entries if e.function == "Stack.push")
    task = load_task(out / entry.task)
    family = [a for a in CATALOGUE if a.kind == "solution" and a.name in ("patch-pytest", "exit0-at-import", "always-equal")]

    report = asyncio.run(run_sandbox_test([task], SandboxConfig(concurrency=2), redteam=family))
    patched = next(r for r in report.records if r.attempt == PREFIX + "patch-pytest")
    assert patched.reward == 1.0 and any(t.startswith("test-framework") for t in patched.tamper), patched
    assert report.forgeable == [] and report.escapable == [] and report.broken == []
