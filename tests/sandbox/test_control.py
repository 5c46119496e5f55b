"""On the real engine: the copy-out runs nothing of the agent's container and lets nothing through
a link; a failure without a trustworthy reward is masked only when a control run fails too: a
failure the attempt provoked (a broken verifier script, a crash inside the trial) ends as the
attempt's (zero), a task that cannot produce a reward is masked and flagged."""

from __future__ import annotations

import asyncio

import pytest

from swerl.errors import SandboxError
from swerl.sandbox import Outcome, SandboxConfig, SandboxManager
from swerl.sandbox import redteam_payloads as p
from swerl.sandbox.redteam import CATALOGUE, PREFIX
from swerl.sandbox.selftest import run_sandbox_test
from swerl.tasks import import_humaneval, load_task

from ._support import containers_of, fixture_task, run

pytestmark = pytest.mark.docker

STAGE = "/tmp/.swerl-redteam"
HOSTILE = (  # a lying tar and base64, then links out of /app, a fifo and a hard link to a file outside it
    f'cp "$(command -v base64)" {STAGE}/real-base64 && chmod 755 {STAGE}/reader && '
    f"for d in /usr/local/bin /usr/bin /bin; do for n in tar base64; do rm -f $d/$n; cp {STAGE}/reader $d/$n; done; done; "
    "cd /app && ln -s /tests tests && ln -s / root && ln -s ../usr/local/bin bin && mkfifo fifo && ln /etc/passwd passwd"
)
LINK_ROOT = "rm -rf /app && ln -s / /app"


@pytest.fixture(scope="module")
def humaneval_task(tmp_path_factory):
    [folder] = import_humaneval(tmp_path_factory.mktemp("he"), limit=1)
    return load_task(folder)


async def _oracle_then(mgr: SandboxManager, task, script: str, files: dict[str, str] | None = None):
    """The correct solution, then ``script`` (its sandbox failure noted), then verification."""
    async with mgr.sandbox(task) as sb:
        await sb.run_solution()
        for path, text in (files or {}).items():
            await sb.write_file(path, text.encode())
        try:
            await sb.exec(script, timeout_s=60)
        except SandboxError as err:
            print("agent phase ended:", err)
        return await sb.verify()


def test_the_copy_out_reads_the_work_product_through_the_engine_and_drops_what_could_escape(docker_client, humaneval_task):
    files = {f"{STAGE}/forged.b64": p.FORGED_TAR_B64, f"{STAGE}/reader": p.lying_reader(f"{STAGE}/forged.b64")}

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=3, warm_pool_size=3)) as mgr:
            verdicts = await asyncio.gather(
                _oracle_then(mgr, humaneval_task, HOSTILE, files), _oracle_then(mgr, humaneval_task, LINK_ROOT),
                _oracle_then(mgr, humaneval_task, p.FILL_PIDS_SH))
            return verdicts, mgr.run_id

    (hostile, link_root, full_pids), run_id = run(body())
    # The lying reader is never asked: the correct solution crosses, the hostile members are counted.
    assert (hostile.outcome, hostile.reward, hostile.verification) == (Outcome.passed, 1.0, "clean_room"), hostile.detail
    assert hostile.work_product_dropped == {"link_out": 3, "special": 1}, hostile.detail
    assert "4 member(s) dropped" in hostile.detail
    # /app -> / is dropped: the clean room has no /app.
    assert (link_root.outcome, link_root.reward, link_root.work_product_dropped) == (Outcome.failed, 0.0, {"link_out": 1})
    # A full pid table killed the keeper: the stopped container is read all the same, and verified.
    assert (full_pids.outcome, full_pids.reward) == (Outcome.passed, 1.0), full_pids.detail
    assert containers_of(docker_client, run_id) == []


class _Crash:
    """A red-team attempt whose trial raises an exception swerl did not foresee."""

    name, kind, description = "crash", "escape", "raises inside the trial"

    async def run(self, mgr, task):
        raise RuntimeError("unforeseen")


def test_a_failure_is_masked_only_when_its_control_fails_too(docker_client):
    """Same container (the fixtures declare no work product): a replaced bash runs the verifier
    script, which reports nothing, and an unforeseen exception ends a trial. On `add` the controls
    read a reward: the attempt's (zero). On a task whose verifier writes no reward every control
    fails too: masked, blamed on the infrastructure, so that task alone is escapable (and broken).
    (The other provoked failures, on a HumanEval task: tests/sandbox/test_redteam.py.)"""
    attempts = [a for a in CATALOGUE if a.name == "fake-bash"]
    report = run(run_sandbox_test([fixture_task("add"), fixture_task("no_reward_file")], SandboxConfig(concurrency=2),
                                  redteam=[*attempts, _Crash()]))
    got = {(r.task, r.attempt.removeprefix(PREFIX)): r for r in report.records}

    def show(key):
        r = got[key]
        return (r.outcome.value, r.reward, r.failure_class.value, r.blame and r.blame.value)

    assert show(("add", "fake-bash")) == ("no_reward_file", 0.0, "zero", "attempt"), got[("add", "fake-bash")].detail
    assert show(("add", "crash")) == ("trial_error", 0.0, "zero", "attempt")
    assert got[("add", "crash")].timings.control_s > 0 and "the control read reward 0" in got[("add", "crash")].detail
    assert show(("add", "oracle")) == ("passed", 1.0, "none", None)
    assert {show(k)[1:] for k in got if k[0] == "no_reward_file"} == {(0.0, "mask", "infrastructure")}
    assert show(("no_reward_file", "null"))[0] == "no_reward_file"
    assert "the control failed too" in got[("no_reward_file", "null")].detail
    assert [e.task for e in report.escapable] == ["no_reward_file"] and report.forgeable == []
    assert {b.task for b in report.broken} == {"no_reward_file"}
    assert containers_of(docker_client, report.run_id) == []


def test_a_control_started_while_the_trials_removal_is_pending_waits_for_it(docker_client, humaneval_task, monkeypatch):
    """Removals made slow (1 s each, as a container of many files is): the trial's clean room
    retires the agent's container in the background, yet the control starts only once both of the
    trial's containers are gone, and the wait is the trial's time (its cleanup_s), not the control's."""
    from swerl.sandbox.control import run_control
    from swerl.sandbox.deployment.pool import Reaper
    from swerl.sandbox.types import TrialTimings

    remove = Reaper._remove

    async def slow_remove(self, container_id):
        await asyncio.sleep(1.0)
        return await remove(self, container_id)

    monkeypatch.setattr(Reaper, "_remove", slow_remove)

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=2, warm_pool=False)) as mgr:
            timings = TrialTimings()
            async with mgr.sandbox(humaneval_task, timings) as sb:
                trial = [sb.container_id]
                await sb.verify()  # the clean room: a second container, the first retired
                trial.append(sb.container_id)
            sandbox = mgr.sandbox

            def spied(*args, **kwargs):
                left.extend(c for c in trial if containers_with_id(c))
                return sandbox(*args, **kwargs)

            left: list[str] = []
            mgr.sandbox = spied
            control = await run_control(mgr, humaneval_task, mgr.engines[0].url)
            return trial, left, timings, control, mgr.run_id

    def containers_with_id(cid):
        return docker_client.containers.list(all=True, filters={"id": cid})

    trial, left, timings, control, run_id = run(body())
    assert len(set(trial)) == 2 and left == [], left  # nothing of the trial was left when the control started
    assert timings.cleanup_s >= 1.0, timings  # the trial's time
    assert control.blame.value == "attempt", control.detail  # the untouched sandbox read a reward
    assert containers_of(docker_client, run_id) == []


def test_a_work_product_over_its_cap_still_leaves_the_containers_tamper_reasons_on_the_failed_record(docker_client, humaneval_task):
    """A sparse file over the work-product cap ends verification at the copy-out (disk_limit); the
    container half of the tamper scan ran before it, so the failed record keeps its reasons."""
    from swerl.sandbox.redteam import Attempt

    attempt = Attempt(name="loader-and-sparse", description="a preloaded library, then a work product over the cap",
                      kind="copy_out", commands=["f=/etc/ld.so; touch $f.pre''load", "truncate -s 8M /app/sparse"])

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False, max_artifact_mb=2)) as mgr:
            return await attempt.run(mgr, humaneval_task), mgr.run_id

    record, run_id = run(body())
    assert record.outcome is Outcome.disk_limit and "over 2 MiB" in record.detail, record.detail
    assert "loader: added /etc/ld.so.preload" in record.tamper, record.tamper
    assert containers_of(docker_client, run_id) == []
