"""Throughput of oracle verifications of the HumanEval tasks, three ways, at concurrency 1 and 2.

    .venv/bin/python bench/sandbox_throughput.py [--tasks DIR] [--limit N] [--concurrency 1 2]

(a) floor: the task's verifier commands (``tests/test.sh``: ``pip3 install pytest`` + ``pytest``)
    as a bare host subprocess, paths rewritten to a temp folder, in a small venv with pytest;
(b) naive: ``docker run --rm`` per verification (bind-mounted /app and /tests, network none):
    the cold container-per-trial shape of common harnesses;
(c) swerl: ``SandboxManager.run_oracle``: a fresh isolated container per trial (warm pool),
    ``solution/`` copied in and ``solve.sh`` run, tests uploaded at verify, the full verifier
    protocol, removal in the background.

Prints trials/s and the per-trial overhead over the floor, per trial-slot
(= wall seconds * concurrency / trials). Figures only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from swerl.sandbox import Outcome, SandboxConfig, SandboxManager
from swerl.tasks import import_humaneval, load_tasks
from swerl.tasks.models import Task

FLOOR_VENV = Path.home() / ".cache" / "swerl" / "bench-floor-venv"


def floor_python_bin() -> Path:
    """A small venv with pytest (and pip) for the floor; built once from PyPI."""
    bin_dir = FLOOR_VENV / "bin"
    if not (bin_dir / "pytest").exists():
        subprocess.run([sys.executable, "-m", "venv", str(FLOOR_VENV)], check=True)
        subprocess.run([str(bin_dir / "pip"), "install", "-q", "pytest"], check=True)
    return bin_dir


def stage_host_copy(task: Task, root: Path) -> Path:
    """Copy tests/ and the oracle's solution.py under ``root``; rewrite test.sh's absolute paths."""
    work = root / task.name
    shutil.copytree(task.tests_dir, work / "tests")
    (work / "app").mkdir()
    assert task.solution_dir is not None
    shutil.copy(task.solution_dir / "solution.py", work / "app" / "solution.py")
    (work / "logs").mkdir()
    script = (work / "tests" / "test.sh").read_text()
    script = script.replace("/logs/verifier", f"{work}/logs").replace("/tests/", f"{work}/tests/")
    script = script.replace("cd /app", f"cd {work}/app")
    (work / "tests" / "test.sh").write_text(script)
    for name in ("test_solution.py",):
        path = work / "tests" / name
        path.write_text(path.read_text().replace('"/app"', f'"{work}/app"'))
    return work


async def run_floor(tasks: list[Task], concurrency: int, root: Path, bin_dir: Path) -> tuple[float, int]:
    slots = asyncio.Semaphore(concurrency)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    works = [stage_host_copy(t, root) for t in tasks]

    async def one(work: Path) -> bool:
        async with slots:
            proc = await asyncio.create_subprocess_exec(
                "bash", str(work / "tests" / "test.sh"), stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, env=env, cwd=work,
            )
            await proc.wait()
        return _reward_is_one(work / "logs" / "reward.txt")

    began = time.monotonic()
    results = await asyncio.gather(*(one(w) for w in works))
    return time.monotonic() - began, sum(results)


async def run_naive(tasks: list[Task], concurrency: int, root: Path, image: str) -> tuple[float, int]:
    slots = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> bool:
        logs = root / f"logs-{task.name}"
        logs.mkdir()
        assert task.solution_dir is not None
        async with slots:
            proc = await asyncio.create_subprocess_exec(
                "docker", "run", "--rm", "--network", "none", "--label", "swerl.run=bench-naive",
                "-v", f"{task.solution_dir}:/app", "-v", f"{task.tests_dir}:/tests:ro", "-v", f"{logs}:/logs/verifier",
                image, "bash", "/tests/test.sh",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )
            await proc.wait()
        return _reward_is_one(logs / "reward.txt")

    began = time.monotonic()
    results = await asyncio.gather(*(one(t) for t in tasks))
    return time.monotonic() - began, sum(results)


async def run_swerl(tasks: list[Task], concurrency: int) -> tuple[float, int]:
    async with SandboxManager(SandboxConfig(concurrency=concurrency)) as mgr:
        await mgr.image_for(tasks[0])  # build outside the timing (cached after the first run)
        async with mgr.sandbox(tasks[0]):  # let the warm pool fill, as in a long run
            pass
        await asyncio.sleep(1.0)
        began = time.monotonic()
        records = await asyncio.gather(*(mgr.run_oracle(t) for t in tasks))
        wall = time.monotonic() - began
    return wall, sum(r.outcome is Outcome.passed for r in records)


def _reward_is_one(path: Path) -> bool:
    try:
        return path.read_text().strip() == "1"
    except OSError:
        return False


def line(name: str, n: int, c: int, wall: float, ok: int, floor_slot: float | None) -> str:
    slot = wall * c / n
    over = "" if floor_slot is None else f"  overhead {slot - floor_slot:+.3f} s/trial"
    return f"{name:<6} c={c}  {n / wall:6.2f} trials/s  {slot:.3f} s per trial-slot{over}  ({ok}/{n} reward 1)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=Path, help="HumanEval task folders (default: import into a temp dir)")
    parser.add_argument("--limit", type=int, default=None, help="Only the first N tasks")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--modes", nargs="+", default=["floor", "naive", "swerl"], choices=["floor", "naive", "swerl"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="swerl-bench-", ignore_cleanup_errors=True) as tmp:
        source = args.tasks
        if source is None:
            source = Path(tmp) / "humaneval"
            import_humaneval(source)
        tasks = list(load_tasks(source, limit=args.limit).tasks)
        image = asyncio.run(_image(tasks[0]))
        bin_dir = floor_python_bin() if "floor" in args.modes else Path()
        n = len(tasks)
        print(f"{n} HumanEval oracle verifications, image {image}, {os.cpu_count()} CPUs", flush=True)
        for c in args.concurrency:
            floor_slot = None
            for mode in args.modes:
                root = Path(tempfile.mkdtemp(prefix=f"{mode}-c{c}-", dir=tmp))
                if mode == "floor":
                    wall, ok = asyncio.run(run_floor(tasks, c, root, bin_dir))
                    floor_slot = wall * c / n
                elif mode == "naive":
                    wall, ok = asyncio.run(run_naive(tasks, c, root, image))
                else:
                    wall, ok = asyncio.run(run_swerl(tasks, c))
                print(line(mode, n, c, wall, ok, None if mode == "floor" else floor_slot), flush=True)


async def _image(task: Task) -> str:
    async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
        return await mgr.image_for(task)


if __name__ == "__main__":
    main()
