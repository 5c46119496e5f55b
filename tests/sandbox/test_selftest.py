"""Every misbehaving fixture task in ONE concurrent batch: each gets the right outcome and
reward 0 unless passed, the well-behaved task is unaffected, and nothing is left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from swerl.sandbox import Outcome, SandboxConfig
from swerl.sandbox.deployment.gc import collect_garbage
from swerl.sandbox.selftest import run_sandbox_test

from ._support import FIXTURES, containers_of, fixture_task, run

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# (task, attempt) -> accepted outcomes
EXPECTED = {  # (task, solution) -> the outcomes it may end in
    **dict.fromkeys([("add", "oracle"), ("reward_json", "null"), ("weak_exit_code", "oracle")], {Outcome.passed}),
    **dict.fromkeys([("add", "null"), ("noisy_output", "null"), ("fork_bomb", "null"), ("network_probe", "null"),
                     ("planted_reward", "oracle"), ("planted_reward", "null"), ("no_tests_collected", "null"),
                     ("weak_exit_code", "null")], {Outcome.failed}),
    ("loop_forever", "null"): {Outcome.verifier_timeout},
    ("memory_hog", "null"): {Outcome.oom, Outcome.failed},
    **dict.fromkeys([("reward_nan", "null"), ("reward_too_big", "null"), ("reward_negative", "null")],
                    {Outcome.bad_reward}),
    **dict.fromkeys([("reward_empty", "null"), ("no_reward_file", "null")], {Outcome.no_reward_file}),
}


def test_misbehaving_tasks_in_one_batch(docker_client):
    tasks = [fixture_task(path.name) for path in sorted(FIXTURES.iterdir())]
    report = run(run_sandbox_test(tasks, SandboxConfig(concurrency=2)))
    got = {(r.task, r.attempt): r for r in report.records}
    assert set(got) == set(EXPECTED)
    for key, accepted in EXPECTED.items():
        record = got[key]
        assert record.outcome in accepted, f"{key}: {record.outcome.value} ({record.detail})"
        assert record.failure_class == record.outcome.failure_class
        if record.outcome is not Outcome.passed:
            assert record.reward == 0.0, key
        else:
            assert record.reward == 1.0, key
        assert record.timings.cleanup_s > 0, f"{key}: container removal not recorded"
    # Only `add` and `weak_exit_code` behave as sandbox-test demands (oracle 1, null 0).
    assert {b.task for b in report.broken} == {t.name for t in tasks} - {"add", "weak_exit_code"}
    assert report.forgeable == []  # no red team asked for
    assert "planted" not in got[("planted_reward", "oracle")].detail
    assert containers_of(docker_client, report.run_id) == []


class _EngineProxy:
    """A private Docker engine socket: forwards to the real engine until :meth:`cut`, then
    closes every connection and stops answering (the engine "goes away" mid-run)."""

    def __init__(self, path: Path, target: str) -> None:
        import socketserver
        import threading

        self.cut_event = threading.Event()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                import select
                import socket

                upstream = socket.socket(socket.AF_UNIX)
                upstream.connect(target)
                pair = {self.request: upstream, upstream: self.request}
                try:
                    while not proxy.cut_event.is_set():
                        ready, _, _ = select.select(list(pair), [], [], 0.05)
                        for sock in ready:
                            data = sock.recv(65536)
                            if not data:
                                return
                            pair[sock].sendall(data)
                finally:
                    upstream.close()

        self.server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        self.server.daemon_threads = True
        self.path = path
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def cut(self) -> None:
        if not self.cut_event.is_set():
            self.cut_event.set()
            self.server.shutdown()
            self.server.server_close()
            self.path.unlink(missing_ok=True)


def test_engine_that_stops_answering_mid_run_is_an_environment_problem(docker_client, tmp_path):
    import os

    from swerl.errors import EnvironmentProblem

    target = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")
    proxy = _EngineProxy(tmp_path / "docker.sock", target)
    tasks = [fixture_task("add"), fixture_task("weak_exit_code"), fixture_task("reward_json")]
    config = SandboxConfig(concurrency=1, docker_base_url=f"unix://{tmp_path / 'docker.sock'}", warm_pool=False,
                           docker_timeout_s=10, drain_timeout_s=5, gc_dead_runs=False, run_id="redteam-outage-test")
    try:
        with pytest.raises(EnvironmentProblem, match="stopped answering") as err:
            run(run_sandbox_test(tasks, config, on_trial=lambda record: proxy.cut()))
        assert err.value.exit_code == 3
    finally:
        proxy.cut()
        # swerl's own gc: a removal the run started before the cut may still be in progress (409).
        collect_garbage(docker_client, run_id="redteam-outage-test")
