"""A fleet of two real Docker engines: the default dockerd and a private one the test starts.

A batch spreads over both (the private engine gets the base image from the default one); an
engine killed mid-batch (SIGKILL by pid) is quarantined, its trials run again on the other, and
the batch is still correct; after its restart it rejoins, and a gc leaves no container on either.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swerl.sandbox import Outcome, SandboxConfig, SandboxManager
from swerl.sandbox.engine_config import EngineConfig
from swerl.sandbox.docker_api import LOCAL_ENGINE_URL
from swerl.sandbox.deployment.gc import collect_garbage
from swerl.sandbox.selftest import run_sandbox_test
from swerl.tasks import load_task

from ._engines import PrivateEngine
from ._support import containers_of, run

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


def _fleet(second: PrivateEngine, **overrides) -> SandboxConfig:
    engines = [EngineConfig(url=LOCAL_ENGINE_URL, slots=2), EngineConfig(url=second.url, slots=2)]
    return SandboxConfig(concurrency=4, engines=engines, docker_timeout_s=20, engine_probe_s=0.5, **overrides)


def _slow_tasks(tmp_path: Path, count: int) -> list:
    """Copies of add-two whose oracle sleeps 2 s first, so trials are in flight when an engine dies."""
    tasks = []
    for i in range(count):
        folder = tmp_path / f"slow-add-{i}"
        shutil.copytree(TASKS / "add-two", folder)
        solve = folder / "solution" / "solve.sh"
        solve.write_text(solve.read_text().replace("set -e\n", "set -e\nsleep 2\n"))
        tasks.append(load_task(folder))
    return tasks


def _client(url: str):
    import docker

    return docker.DockerClient(base_url=url, timeout=30)


def test_a_batch_spreads_over_both_engines(docker_client, second_engine):
    tasks = [load_task(TASKS / name) for name in ("add-two", "count-vowels", "reverse-words")]
    report = run(run_sandbox_test(tasks, _fleet(second_engine)))
    assert report.ok, report.broken
    assert {r.engine for r in report.records} == {LOCAL_ENGINE_URL, second_engine.url}
    assert [r.outcome for r in report.records] == [Outcome.passed, Outcome.failed] * 3
    other = _client(second_engine.url)
    assert other.images.get("python:3.10-slim").id == docker_client.images.get("python:3.10-slim").id  # copied over
    assert containers_of(docker_client, report.run_id) == [] and containers_of(other, report.run_id) == []


def test_an_engine_killed_mid_batch_leaves_the_batch_correct_and_nothing_behind(docker_client, second_engine, tmp_path):
    tasks = _slow_tasks(tmp_path, 4)
    killed = []

    def kill_once(record) -> None:
        if not killed:
            killed.append(record)
            second_engine.kill()

    try:
        report = run(run_sandbox_test(tasks, _fleet(second_engine), on_trial=kill_once))
    finally:
        if second_engine.proc is not None and second_engine.proc.poll() is not None:
            second_engine.start()
    assert report.ok, report.broken
    moved = [r for r in report.records if r.engine_retries]
    assert moved, "no trial was in flight on the killed engine"
    assert all(r.engine == LOCAL_ENGINE_URL for r in moved)
    other = _client(second_engine.url)
    collect_garbage(other, run_id=report.run_id)  # what the dead engine kept; the run itself is over
    assert containers_of(docker_client, report.run_id) == [] and containers_of(other, report.run_id) == []


def test_a_quarantined_engine_rejoins_when_it_answers_again(docker_client, second_engine):
    import asyncio

    async def body() -> tuple[bool, bool, bool]:
        async with SandboxManager(_fleet(second_engine, gc_dead_runs=False)) as mgr:
            engine = mgr.engines[1]
            second_engine.kill()
            down = await mgr.fleet.check(engine, "killed by the test")
            healthy_while_down = engine.healthy
            await asyncio.to_thread(second_engine.start)
            for _ in range(300):  # probes back off 0.5, 1, 2, 4, 8 s
                if engine.healthy:
                    break
                await asyncio.sleep(0.1)
            return down, healthy_while_down, engine.healthy

    assert run(body()) == (True, False, True)


def test_every_engine_down_is_an_environment_problem(tmp_path):
    from swerl.errors import EnvironmentProblem

    config = SandboxConfig(engines=[EngineConfig(url=f"unix://{tmp_path}/a.sock"), EngineConfig(url=f"unix://{tmp_path}/b.sock")])
    with pytest.raises(EnvironmentProblem, match="not reachable") as err:
        run(SandboxManager(config).__aenter__())
    assert err.value.exit_code == 3
