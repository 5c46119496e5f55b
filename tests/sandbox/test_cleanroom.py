"""Rewards that the agent's environment cannot forge: each environmental exploit, tried as the
agent phase of a HumanEval task made by the importer, scores 0 under clean-room verification,
and the hardened same-container path stops the ones aimed at its wipe and its processes; the
oracle scores 1 in both."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from swerl.sandbox import Outcome, SandboxConfig, SandboxManager
from swerl.tasks import import_humaneval, load_task

from ._support import containers_of, run

pytestmark = pytest.mark.docker

WRONG = "printf 'def has_close_elements(numbers, threshold):\\n    return False\\n' > /app/solution.py\n"
# One shell line per exploit kind; each also leaves a wrong solution in /app.
EXPLOITS = {
    "fake_pytest_on_path": "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/sbin/pytest && chmod 755 /usr/local/sbin/pytest",
    "collect_only_ini_in_root": "printf '[pytest]\\naddopts = --collect-only -q\\n' > /pytest.ini",
    "planted_reward_read_only": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && chmod 555 /logs/verifier /logs",
    "exit_zero_pth": "echo 'import os; os._exit(0)' > \"$(python3 -c 'import site; print(site.getsitepackages()[0])')/zz_exit.pth\"",
    "planted_tests_read_only": (
        "mkdir -p /tests && printf 'mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh"
        " && chmod 444 /tests/test.sh && chmod 555 /tests"
    ),
    "agent_process_rewrites_reward": (
        "setsid sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.01; done'"
        " >/dev/null 2>&1 < /dev/null &"
    ),
}
# What the hardened same-container path must stop (the other kinds are the task harness's job there).
SAME_CONTAINER = ("planted_reward_read_only", "planted_tests_read_only", "agent_process_rewrites_reward")


@pytest.fixture(scope="module")
def humaneval_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("he")
    [folder] = import_humaneval(root, limit=1)
    task = load_task(folder)
    assert task.config.verifier.artifacts == ["/app"]
    return task


async def _exploit(mgr: SandboxManager, task, name: str):
    async with mgr.sandbox(task) as sb:
        setup = await sb.exec(WRONG + EXPLOITS[name], timeout_s=30)
        assert setup.exit_code == 0, (name, setup.output)
        return name, await sb.verify()


async def _trials(task, verification: str, names):
    config = SandboxConfig(concurrency=3, verification=verification, warm_pool_size=3)
    async with SandboxManager(config) as mgr:
        results = await asyncio.gather(mgr.run_oracle(task), *(_exploit(mgr, task, n) for n in names))
        return results[0], dict(results[1:]), mgr.run_id


def test_clean_room_scores_each_environmental_exploit_zero_and_the_oracle_one(docker_client, humaneval_task):
    oracle, verdicts, run_id = run(_trials(humaneval_task, "auto", list(EXPLOITS)))
    assert (oracle.outcome, oracle.reward, oracle.verification) == (Outcome.passed, 1.0, "clean_room")
    forged = {name: v.outcome.value for name, v in verdicts.items() if v.reward != 0.0}
    assert forged == {}
    assert all(v.verification == "clean_room" and v.outcome is Outcome.failed for v in verdicts.values()), verdicts
    assert containers_of(docker_client, run_id) == []


def test_hardened_same_container_stops_planted_files_and_agent_processes(docker_client, humaneval_task):
    oracle, verdicts, run_id = run(_trials(humaneval_task, "same_container", SAME_CONTAINER))
    assert (oracle.outcome, oracle.reward, oracle.verification) == (Outcome.passed, 1.0, "same_container")
    forged = {name: v.outcome.value for name, v in verdicts.items() if v.reward != 0.0}
    assert forged == {}
    assert all(v.verification == "same_container" and v.outcome is Outcome.failed for v in verdicts.values()), verdicts
    assert containers_of(docker_client, run_id) == []


def test_test_sh_runs_in_the_image_workdir_with_the_work_product_in_both_modes(humaneval_task, tmp_path):
    """The work product replaces /app (the image's WORKDIR) before test.sh runs: a test.sh that
    uses relative paths finds it, in the clean room as in the agent's container."""
    folder = tmp_path / "relative-test-sh"
    shutil.copytree(humaneval_task.path, folder)
    (folder / "tests" / "test.sh").write_text(
        '#!/bin/bash\nmkdir -p /logs/verifier\n'
        'if [ "$(pwd)" = /app ] && [ -f solution.py ] && grep -q def solution.py; then r=1; else r=0; fi\n'
        'echo "$r" > /logs/verifier/reward.txt\n'
    )
    task = load_task(folder)

    async def oracle(verification: str):
        async with SandboxManager(SandboxConfig(concurrency=1, verification=verification)) as mgr:
            return await mgr.run_oracle(task)

    for mode in ("clean_room", "same_container"):
        trial = run(oracle(mode))
        assert (trial.verification, trial.reward) == (mode, 1.0), (mode, trial.outcome, trial.detail)
        assert "getcwd" not in (trial.detail or ""), trial.detail
