"""`swerl sandbox-test --redteam` on the real engine: one HumanEval task made by the importer and
rewritten in Harbor's schema 1.3 spelling with a separate verifier (every in-process exploit
scores 0, the oracle 1, all in the clean room, as for the 1.0 spelling, and no copy-out attack or
penalty escape gets its trial masked) and the deliberately weak fixture task (the attempts that
forge it are named, exit 1; none escapes its penalty there either), in one CLI run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.agent.redteam import CATALOGUE
from swerl.tasks import import_humaneval

from ._support import FIXTURES, containers_of, rewrite_in_schema_13

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SOLUTION_KIND = {a.name for a in CATALOGUE if a.kind == "solution"}
# Forge a verifier that rewards "pytest exited 0" (tests/fixtures/sandbox_tasks/weak_exit_code) from
# the work product alone, so also under clean-room verification (environment attempts forge it
# too in same-container mode; kill-verifier races its trap, so it is not required here).
WEAK_FORGERS = {"exit0-at-import", "exit0-at-exit", "always-equal", "eq-subclasses", "patch-pytest", "forge-junit"}


@pytest.fixture(scope="module")
def redteam_run(tmp_path_factory: pytest.TempPathFactory):
    """One `sandbox-test --redteam` over humaneval-000 (schema 1.3, separate verifier) and
    weak_exit_code: (process, records)."""
    root = tmp_path_factory.mktemp("redteam")
    [humaneval] = import_humaneval(root, limit=1)
    rewrite_in_schema_13(humaneval / "task.toml")
    subprocess.run(["cp", "-r", str(FIXTURES / "weak_exit_code"), str(root)], check=True)
    out = subprocess.run([sys.executable, "-m", "swerl.cli", "sandbox-test", str(root), "--redteam", "-c", "4",
                          "--json", str(root / "r.json")], capture_output=True, text=True, timeout=900)
    records = json.loads((root / "r.json").read_text())
    return out, {(r["task"], r["attempt"]): r for r in records}


def test_humaneval_oracle_scores_one_and_no_in_process_exploit_scores(redteam_run):
    _, records = redteam_run
    assert records[("humaneval-000", "oracle")]["reward"] == 1.0
    assert records[("humaneval-000", "null")]["reward"] == 0.0
    for name in SOLUTION_KIND:
        record = records[("humaneval-000", f"redteam/{name}")]
        assert record["reward"] == 0.0 and record["forged"] is False, (name, record["detail"])
        assert record["outcome"] == "failed", (name, record["outcome"], record["detail"])


def test_no_attempt_escapes_its_penalty_on_either_task(redteam_run):
    out, records = redteam_run
    escaped = {key: (r["outcome"], r["detail"]) for key, r in records.items() if r.get("escaped")}
    assert escaped == {}
    assert not any(x.startswith("ESCAPABLE") for x in out.stdout.splitlines()), out.stdout[-2000:]
    assert "0/2 escapable by the red team" in out.stdout
    # The provoked failures were settled by their control runs: the attempt's fault, reward 0 kept.
    he = {a.removeprefix("redteam/"): r for (task, a), r in records.items() if task == "humaneval-000"}
    for name in ("disk-flood", "inode-flood", "sparse-work-product", "slow-removal-disk-fill"):
        assert (he[name]["outcome"], he[name]["failure_class"], he[name]["blame"]) == ("disk_limit", "zero", "attempt")
    assert he["links-out-of-work-product"]["work_product_dropped"]
    # Bytecode never crosses; a work product made to be slow to check is checked and verified.
    assert all(he[n]["work_product_dropped"].get("bytecode") for n in ("unchecked-pyc", "sourceless-pyc"))
    assert (he["deep-tree-work-product"]["outcome"], he["deep-tree-work-product"]["failure_class"]) == ("failed", "none")
    # Sparse files cost no disk, taken rights are given back, a full pid table does not stop verification.
    for name in ("sparse-disk-flood", "chmod-reward-at-import", "fill-pids", "fill-pids-at-import"):
        assert (he[name]["outcome"], he[name]["failure_class"], he[name]["blame"]) == ("failed", "none", None), name
    assert "rights the tests took were restored" in he["chmod-reward-at-import"]["detail"]
    assert all(he[n]["outcome"] == "failed" for n in ("end-shell-exit", "end-shell-exec", "end-shell-set-e", "context-flood"))


def test_weak_task_is_named_forgeable_with_the_attempts_that_forged_it(redteam_run):
    out, records = redteam_run
    assert out.returncode == 1, out.stderr[-2000:]
    forged = {a.removeprefix("redteam/") for (task, a), r in records.items() if task == "weak_exit_code" and r.get("forged")}
    assert WEAK_FORGERS <= forged, WEAK_FORGERS - forged
    line = next(x for x in out.stdout.splitlines() if x.startswith("FORGEABLE weak_exit_code:"))
    assert all(name in line for name in WEAK_FORGERS), line
    assert records[("weak_exit_code", "oracle")]["reward"] == 1.0  # a working verifier, just a weak one
    assert records[("weak_exit_code", "null")]["reward"] == 0.0
    # It declares no artifacts, so it is verified in the agent's container: environment attempts may forge it too.
    # (Episode attempts and trials stopped before verification record no mode.)
    assert {r["verification"] for (task, _), r in records.items() if task == "weak_exit_code"} - {None} == {"same_container"}
    # humaneval-000 (artifacts declared, so the clean room under the default "auto") is forgeable by none.
    assert not any(x.startswith("FORGEABLE humaneval-000") for x in out.stdout.splitlines()), out.stdout[-2000:]
    he = {a: r for (task, a), r in records.items() if task == "humaneval-000"}
    assert len(he) == len(CATALOGUE) + 2 and {r["verification"] for r in he.values()} - {None} == {"clean_room"}
    assert [a for a, r in he.items() if a.startswith("redteam/") and (r["reward"] != 0.0 or r["forged"])] == []


def test_red_team_trials_leave_no_container(redteam_run, docker_client):
    out, _ = redteam_run
    line = next(x for x in out.stdout.splitlines() if x.startswith("sandbox-test ") and "(run " in x)
    run_id = line.rsplit("(run ", 1)[1].removesuffix(")")
    assert containers_of(docker_client, run_id) == []

