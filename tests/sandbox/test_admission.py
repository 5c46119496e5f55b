"""On the real engine, with its free disk made small (the probe says so; the reservations are
real): a trial waits while the trials in flight hold the disk it needs, and a trial whose budget
the engine cannot hold is refused, naming what is free and what it needs."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from swerl.errors import SandboxError
from swerl.sandbox import Outcome, SandboxConfig, SandboxManager
from swerl.tasks import load_task

from ._support import containers_of, copy_task, run

pytestmark = pytest.mark.docker


def _task_with_budget(tmp_path, storage_mb: int):
    folder = copy_task("add", tmp_path)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("storage_mb = 1024\n", f"storage_mb = {storage_mb}\n"))
    return load_task(folder)


def _small_engine(mgr: SandboxManager, free_mb: int) -> None:
    async def probe():  # what limits.free_disk would say of a data root with free_mb MiB free
        return SimpleNamespace(root="/var/lib/docker", mib=free_mb, said="")

    mgr.engines[0].admission.probe = probe


def test_a_trial_waits_while_the_trials_in_flight_hold_the_disk_it_needs(docker_client, tmp_path):
    task = _task_with_budget(tmp_path, 100)

    async def trial(mgr, spans, hold_s):
        async with mgr.sandbox(task) as sb:
            began = time.monotonic()
            await sb.exec("true")
            await asyncio.sleep(hold_s)
            spans.append((began, time.monotonic()))

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=2, warm_pool=False)) as mgr:
            _small_engine(mgr, 150)  # room for one budget of 100 MiB, not two
            first, second = [], []
            await asyncio.gather(trial(mgr, first, 1.0), trial(mgr, second, 0.0))
            return first, second, mgr.run_id

    first, second, run_id = run(body())
    assert second[0][0] >= first[0][1], (first, second)  # the second started once the first was gone
    assert containers_of(docker_client, run_id) == []


def test_a_trial_whose_budget_the_engine_cannot_hold_is_refused_naming_free_and_needed(docker_client, tmp_path):
    task = _task_with_budget(tmp_path, 100)

    async def body():
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False, admission_wait_s=1.0)) as mgr:
            _small_engine(mgr, 60)
            began = time.monotonic()
            with pytest.raises(SandboxError) as caught:
                async with mgr.sandbox(task):
                    pass
            return caught.value, time.monotonic() - began, mgr.run_id

    err, waited_s, run_id = run(body())
    assert err.outcome is Outcome.start_error and waited_s >= 1.0
    assert "has 60 MiB free on Docker's data root" in str(err) and "storage_mb = 100 MiB" in str(err), str(err)
    assert containers_of(docker_client, run_id) == []
