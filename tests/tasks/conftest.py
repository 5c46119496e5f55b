"""Helpers for tasks tests: run a task's real tests/test.sh on the host, without Docker."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

HostVerifier = Callable[[Path, "str | None"], float]


def _run_test_sh(task_dir: Path, solution: str | None, work: Path) -> float:
    """Run ``tests/test.sh`` with its container paths (/app, /tests, /logs/verifier) mapped
    into ``work`` and the host venv's pytest; return the reward it wrote.

    ``solution`` is the text of /app/solution.py, or None for the null attempt (empty /app).
    Only the paths and the (offline) pip line change; the trap and pytest call run as written.
    """
    shutil.rmtree(work, ignore_errors=True)
    app, tests, logs = work / "app", work / "tests", work / "logs" / "verifier"
    app.mkdir(parents=True)
    shutil.copytree(task_dir / "tests", tests)
    if solution is not None:
        (app / "solution.py").write_text(solution)
    script = (task_dir / "tests" / "test.sh").read_text()
    assert "pip3 install" in script and "cd /app" in script and "/tests/test_solution.py" in script
    script = (script.replace("/logs/verifier", str(logs)).replace("/tests/", f"{tests}/")
              .replace("cd /app", f"cd {app}").replace("pip3 install", "true pip3 install"))
    (work / "test.sh").write_text(script)
    env = {**os.environ, "PYTHONPATH": str(app), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYTEST_ADDOPTS": "-p no:cacheprovider"}
    subprocess.run(["bash", str(work / "test.sh")], env=env, cwd=work, capture_output=True, timeout=120)
    return float((logs / "reward.txt").read_text())


@pytest.fixture
def host_verifier(tmp_path: Path) -> HostVerifier:
    """``host_verifier(task_dir, solution_text_or_None) -> reward`` (see :func:`_run_test_sh`)."""
    counter = iter(range(1_000))
    return lambda task_dir, solution: _run_test_sh(task_dir, solution, tmp_path / f"verify-{next(counter)}")


def _run_harness(task_dir: Path, solution: str | dict[str, str | bytes] | None, work: Path) -> float:
    """Run a hardened task's real verifier (``tests/swerl_run_tests.py`` with its pinned pytest
    and, for isolated tasks, ``swerl_solution_proxy.py``) on the host; return its reward.

    ``/app`` in ``test_solution.py`` is mapped into ``work``; ``solution`` is the text of
    ``solution.py``, or ``{relative path: text or bytes}`` for several files in /app, or None (empty /app).
    The host venv's interpreter and pytest stand in for the image's.
    """
    import re

    shutil.rmtree(work, ignore_errors=True)
    app, tests = work / "app", work / "tests"
    app.mkdir(parents=True)
    shutil.copytree(task_dir / "tests", tests)
    files = {"solution.py": solution} if isinstance(solution, str) else (solution or {})
    for name, content in files.items():
        (app / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (app / name).write_bytes(content)
        else:
            (app / name).write_text(content)
    test_file = tests / "test_solution.py"
    test_file.write_text(test_file.read_text().replace('"/app"', repr(str(app))))
    expected = re.search(r"--expect (\d+)", (tests / "test.sh").read_text()).group(1)
    reward_file = work / "reward.txt"
    reward_file.write_text("0\n")
    subprocess.run([sys.executable, "-I", "-S", str(tests / "swerl_run_tests.py"), "--expect", expected,
                    "--reward", str(reward_file), str(test_file)], cwd=work, capture_output=True, timeout=120)
    return float(reward_file.read_text())


@pytest.fixture
def harness_verifier(tmp_path: Path) -> Callable[..., float]:
    """``harness_verifier(task_dir, solution) -> reward`` for swerl-generated (hardened) tasks."""
    counter = iter(range(1_000))
    return lambda task_dir, solution: _run_harness(task_dir, solution, tmp_path / f"harness-{next(counter)}")
