"""`swerl sandbox-test`, `swerl sandbox build-base`, `swerl sandbox gc` through the real entry point
(exit codes 0 / 1 / 2 / 3, JSON report, one-line errors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from swerl.sandbox import SandboxConfig

from ._support import FIXTURES, copy_task

SWERL = [sys.executable, "-m", "swerl.cli"]


def swerl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*SWERL, *args], capture_output=True, text=True, timeout=300, env=env)


def test_sandbox_config_rejects_unknown_fields():
    with pytest.raises(ValidationError):
        SandboxConfig(concurency=2)


def test_missing_path_exits_2_with_one_line():
    out = swerl("sandbox-test", "/nonexistent/tasks")
    assert out.returncode == 2
    assert "/nonexistent/tasks" in out.stderr and "Traceback" not in out.stderr


def test_unreachable_docker_exits_3():
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    out = swerl("sandbox", "build-base", env=env)
    assert out.returncode == 3 and "Docker is not reachable" in out.stderr and "Traceback" not in out.stderr


def test_engines_table_names_an_unreachable_engine_and_exits_3(tmp_path):
    out = swerl("sandbox", "engines", "--engine", f"unix://{tmp_path}/none.sock")
    assert out.returncode == 3 and "Traceback" not in out.stderr
    assert f"unix://{tmp_path}/none.sock" in out.stdout and "NO" in out.stdout
    assert "1 of 1 engine unreachable" in out.stderr


def test_an_engine_url_of_an_unknown_scheme_exits_2():
    out = swerl("sandbox-test", str(FIXTURES / "add"), "--engine", "ssh://host")
    assert out.returncode == 2 and "--engine" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.docker
def test_engines_table_shows_the_local_engine(docker_client):
    out = swerl("sandbox", "engines")
    assert out.returncode == 0, out.stderr
    assert docker_client.version()["Version"] in out.stdout and "yes" in out.stdout


@pytest.mark.docker
def test_sandbox_test_passes_a_good_task_and_writes_json(docker_client, tmp_path):
    out = swerl("sandbox-test", str(FIXTURES / "add"), "--concurrency", "2", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    assert "1/1 tasks behave" in out.stdout
    records = json.loads((tmp_path / "r.json").read_text())
    assert [(r["task"], r["attempt"], r["outcome"], r["reward"]) for r in records] == [
        ("add", "oracle", "passed", 1.0), ("add", "null", "failed", 0.0),
    ]
    assert set(records[0]["timings"]) == {"build_s", "start_s", "wait_s", "agent_s", "verify_s", "control_s", "cleanup_s",
                                          "warm_containers", "cold_containers"}
    # add verifies in its own container: each trial took one, warm (a pool) or started on demand
    assert all(r["timings"]["warm_containers"] + r["timings"]["cold_containers"] == 1 for r in records)
    assert records[0]["blame"] is None and records[0]["work_product_dropped"] == {}


@pytest.mark.docker
def test_sandbox_test_exits_1_and_names_the_broken_task(docker_client, tmp_path):
    copy_task("add", tmp_path)
    copy_task("reward_nan", tmp_path)
    out = swerl("sandbox-test", str(tmp_path), "-c", "2")
    assert out.returncode == 1
    assert "1/2 tasks behave" in out.stdout
    assert "BROKEN reward_nan" in out.stdout and "bad_reward" in out.stdout


@pytest.mark.docker
def test_build_base_is_idempotent(docker_client):
    out = swerl("sandbox", "build-base")
    assert out.returncode == 0 and "ready" in out.stdout, out.stderr
