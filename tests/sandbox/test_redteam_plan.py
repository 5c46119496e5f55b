"""How red-team attempts are played on a task and counted, without an engine."""

from __future__ import annotations

from pathlib import Path


def test_a_solution_attempt_on_a_mined_task_appends_to_the_module_its_tests_import():
    """The work module is the one an in-process task names (``[metadata] file``); other tasks keep
    ``/app/solution.py``, and environment attempts are unchanged."""
    from swerl.sandbox.redteam import CATALOGUE, SOLUTION, for_task, is_forged, work_module
    from swerl.sandbox.types import TrialRecord
    from swerl.tasks.load import load_task

    plain = load_task(Path(__file__).resolve().parents[1] / "fixtures" / "sandbox_tasks" / "add")
    mined = plain.model_copy(update={"config": plain.config.model_copy(update={"metadata": {
        "file": "pkg/core.py", "harness": "in-process"}})})
    patch = next(a for a in CATALOGUE if a.name == "patch-pytest")
    env = next(a for a in CATALOGUE if a.kind == "environment")
    assert work_module(plain) is None and for_task(patch, plain) is patch and for_task(env, mined) is env
    assert work_module(mined) == "/app/pkg/core.py"
    played = for_task(patch, mined)
    assert SOLUTION not in played.files and played.commands[0].endswith(">> /app/pkg/core.py")
    escaping = mined.model_copy(update={"config": mined.config.model_copy(update={"metadata": {
        "file": "../etc/x.py", "harness": "in-process"}})})
    assert work_module(escaping) is None
    record = TrialRecord(task="t", attempt="redteam/patch-pytest", outcome="passed", reward=1.0,
                         tamper=["test-framework: ..."])
    assert is_forged(record) and not is_forged(record, zeroed=True)
    assert is_forged(record.model_copy(update={"tamper": []}), zeroed=True)
