"""Throughput of oracle verifications of the HumanEval tasks, four ways, at concurrency 1 and 2.

    .venv/bin/python bench/sandbox_throughput.py [--tasks DIR] [--limit N] [--concurrency 1 2]
        [--modes floor naive swerl clean] [--pools warm cold] [--engine URL --engine URL ...]
        [--runtime NAME [NAME ...]]

(a) floor: the verifier's pytest command (``pytest tests/test_solution.py -v --tb=short``) as a
    bare host subprocess, in a small venv with pytest (no sandbox, no pip, no bash);
(b) naive: ``docker run --rm`` of the task's ``tests/test.sh`` per verification (solution and
    tests bind-mounted, network none): the cold container-per-trial shape of common harnesses;
(c) swerl: ``SandboxManager.run_oracle`` with ``verification="same_container"``: a fresh
    isolated container per trial (warm pool), ``solution/`` copied in and ``solve.sh`` run,
    tests uploaded at verify, the full (hardened) verifier protocol in that container, removal
    in the background;
(d) clean: the same with ``verification="clean_room"``: after solve.sh the work product
    (``/app``) is read out, the agent's container removed, and the tests run in a second fresh
    container of the pristine image holding only ``/app``.

``--pools warm cold`` (the default) runs the swerl and clean modes twice: with warm pools planned
for ``c`` trials at once (``SandboxManager.plan``: both containers of a clean-room trial come
started) and without (``swerl/cold``, ``clean/cold``: every container created and started when
the trial asks for it), interleaved in the same rounds; each line ends with the share of the
mode's containers taken warm.

``--runtime NAME`` runs the swerl and clean modes' containers under that OCI runtime (e.g. crun,
registered with the engine: ``dockerd --add-runtime crun=/usr/bin/crun``; runsc: ``SWERL_RUNSC=1
bash sandboxes/ensure-docker.sh``). Several names (``--runtime runc runsc``) run each of those
modes once per runtime, interleaved in the same rounds (``clean@runc``, ``clean@runsc``), so their
cost per trial is measured side by side under the same load.

With two or more ``--engine`` URLs the swerl and clean modes run on that fleet (concurrency
is then per engine: each engine gets ``c`` slots) and print, per engine, the trials it ran, the
mean seconds of its trials (start + solve + verify) minus the floor's per-trial seconds, and
the balance (fewest / most trials of an engine). On one machine the fleet shares the same CPUs,
so the total stays CPU-bound: the mode measures the fleet's overhead and balance, not a speed-up.

Prints trials/s and the per-trial overhead over the floor, per trial-slot
(= wall seconds * concurrency / trials). The modes run interleaved in rounds of ``--chunk``
tasks, so a busy shared machine slows them alike. Figures only: nothing here asserts a speed.
The first lines name the machine (CPU, bf16 probe, what ``auto`` resolves to); ``auto`` chooses
no precision or generator here (sandboxes and verifiers only), so this bench has no ``auto`` mode.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from swerl.sandbox import Outcome, SandboxConfig, SandboxManager, TrialRecord
from swerl.sandbox.engine_config import EngineConfig
from swerl.tasks import import_humaneval, load_tasks
from swerl.tasks.task_folder import Task

FLOOR_VENV = Path.home() / ".cache" / "swerl" / "bench-floor-venv"


def floor_python_bin() -> Path:
    """A small venv with pytest (and pip) for the floor; built once from PyPI."""
    bin_dir = FLOOR_VENV / "bin"
    if not (bin_dir / "pytest").exists():
        subprocess.run([sys.executable, "-m", "venv", str(FLOOR_VENV)], check=True)
        subprocess.run([str(bin_dir / "pip"), "install", "-q", "pytest"], check=True)
    return bin_dir


def stage_host_copy(task: Task, root: Path) -> Path:
    """Copy tests/ and the oracle's solution.py under ``root/<task>``, with the tests' ``/app``
    path pointed at the copy."""
    work = root / task.name
    shutil.copytree(task.tests_dir, work / "tests")
    (work / "app").mkdir()
    assert task.solution_dir is not None
    shutil.copy(task.solution_dir / "solution.py", work / "app" / "solution.py")
    test_file = work / "tests" / "test_solution.py"
    test_file.write_text(test_file.read_text().replace('"/app"', f'"{work}/app"'))
    return work


async def run_floor(works: list[Path], concurrency: int, bin_dir: Path) -> tuple[float, int]:
    """(a) ``pytest tests/test_solution.py -v --tb=short`` per task as a host subprocess."""
    slots = asyncio.Semaphore(concurrency)

    async def one(work: Path) -> bool:
        async with slots:
            proc = await asyncio.create_subprocess_exec(
                str(bin_dir / "pytest"), str(work / "tests" / "test_solution.py"), "-v", "--tb=short",
                "-p", "no:cacheprovider", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                cwd=work / "app", env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )
            return await proc.wait() == 0

    began = time.monotonic()
    results = await asyncio.gather(*(one(w) for w in works))
    return time.monotonic() - began, sum(results)


async def run_naive(tasks: list[Task], concurrency: int, root: Path, image: str) -> tuple[float, int]:
    """(b) ``docker run --rm`` of the task's verifier per task (solution and tests bind-mounted)."""
    slots = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> bool:
        logs = Path(tempfile.mkdtemp(prefix=f"logs-{task.name}-", dir=root))
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


async def run_swerl(mgr: SandboxManager, tasks: list[Task], sink: list[TrialRecord]) -> tuple[float, int]:
    """(c)/(d) ``SandboxManager.run_oracle`` per task: fresh sandbox, solve.sh, verifier protocol."""
    began = time.monotonic()
    records = await asyncio.gather(*(mgr.run_oracle(t) for t in tasks))
    sink.extend(records)
    return time.monotonic() - began, sum(r.outcome is Outcome.passed for r in records)


VERIFICATION = {"swerl": "same_container", "clean": "clean_room"}


def variant_names(modes: list[str], runtimes: list[str | None], pools: list[str]) -> dict[str, tuple[str, str | None, bool]]:
    """Name -> (mode, runtime, warm pools on) of every variant run: the swerl modes once per
    runtime (``mode@runtime`` when there are several) and per pool setting (``mode/cold`` without)."""
    out: dict[str, tuple[str, str | None, bool]] = {}
    for mode in modes:
        if mode not in VERIFICATION:
            out[mode] = (mode, None, False)
            continue
        for runtime in runtimes:
            for pool in pools:
                name = mode + (f"@{runtime or 'default'}" if len(runtimes) > 1 else "") + ("/cold" if pool == "cold" else "")
                out[name] = (mode, runtime, pool == "warm")
    return out


async def bench(tasks: list[Task], image: str, concurrency: int, modes: list[str], chunk: int, root: Path,
                bin_dir: Path, engines: list[str], records: dict[str, list[TrialRecord]],
                runtimes: list[str | None] | None = None, pools: list[str] | None = None) -> dict[str, tuple[float, int]]:
    """Run the modes interleaved chunk by chunk (so machine load hits them alike); sum per mode
    (:func:`variant_names`). ``records`` receives the trial records of the swerl modes (they
    name their engine and count their warm containers)."""
    variants = variant_names(modes, runtimes or [None], pools or ["warm"])
    totals = {name: (0.0, 0) for name in variants}
    works = {t.name: stage_host_copy(t, root / f"floor-c{concurrency}") for t in tasks} if "floor" in modes else {}
    async with contextlib.AsyncExitStack() as stack:
        managers = {}
        for name, (mode, runtime, warm) in ((n, v) for n, v in variants.items() if v[0] in VERIFICATION):
            fleet = [EngineConfig(url=url, slots=concurrency) for url in engines]
            config = SandboxConfig(concurrency=concurrency * max(len(fleet), 1), verification=VERIFICATION[mode],
                                   engines=fleet, runtime=runtime, warm_pool=warm)
            managers[name] = mgr = await stack.enter_async_context(SandboxManager(config))
            # Warm up once, as in a long run: image cached, pools planned for c trials at once and filled.
            await asyncio.gather(*(mgr.run_null(tasks[0]) for _ in range(2)))
            await mgr.plan(tasks, config.concurrency)
        await asyncio.sleep(1.0)
        for i in range(0, len(tasks), chunk):
            part = tasks[i : i + chunk]
            for name, (mode, _, _) in variants.items():
                if mode == "floor":
                    wall, ok = await run_floor([works[t.name] for t in part], concurrency, bin_dir)
                elif mode == "naive":
                    wall, ok = await run_naive(part, concurrency, root, image)
                else:
                    wall, ok = await run_swerl(managers[name], part, records.setdefault(name, []))
                totals[name] = (totals[name][0] + wall, totals[name][1] + ok)
    return totals


def _reward_is_one(path: Path) -> bool:
    try:
        return path.read_text().strip() == "1"
    except OSError:
        return False


def line(name: str, n: int, c: int, wall: float, ok: int, floor_slot: float | None,
         records: list[TrialRecord] | None = None) -> str:
    """One mode's figures: trials/s, seconds per trial-slot, the overhead over the floor, the
    trials that read reward 1 and (swerl modes) the share of containers taken warm."""
    slot = wall * c / n
    over = "" if floor_slot is None else f"  overhead {slot - floor_slot:+.3f} s/trial"
    warm = sum(r.timings.warm_containers for r in records or [])
    taken = warm + sum(r.timings.cold_containers for r in records or [])
    hits = f", {warm / taken:.0%} of {taken} containers warm" if taken else ""
    return f"{name:<14} c={c}  {n / wall:6.2f} trials/s  {slot:.3f} s per trial-slot{over}  ({ok}/{n} reward 1{hits})"


def engine_lines(mode: str, records: list[TrialRecord], floor_s: float | None) -> list[str]:
    """Per engine: trials, mean trial seconds (start + solve + verify) over the floor, balance."""
    by_engine: dict[str, list[TrialRecord]] = {}
    for record in records:
        by_engine.setdefault(record.engine or "?", []).append(record)
    lines = []
    for url, rows in sorted(by_engine.items()):
        mean = sum(r.timings.start_s + r.timings.agent_s + r.timings.verify_s for r in rows) / len(rows)
        over = "" if floor_s is None else f", overhead {mean - floor_s:+.3f} s/trial"
        lines.append(f"  {mode:<6} {url}: {len(rows)} trials ({len(rows) / len(records):.0%}), "
                     f"{mean:.3f} s/trial{over}, {sum(r.engine_retries for r in rows)} moved here")
    counts = [len(rows) for rows in by_engine.values()]
    lines.append(f"  {mode:<6} balance {min(counts) / max(counts):.2f} (fewest / most trials per engine)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=Path, help="HumanEval task folders (default: import into a temp dir)")
    parser.add_argument("--limit", type=int, default=None, help="Only the first N tasks")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--chunk", type=int, default=20, help="Tasks per interleaved round of the modes")
    parser.add_argument("--modes", nargs="+", default=["floor", "naive", "swerl", "clean"],
                        choices=["floor", "naive", "swerl", "clean"])
    parser.add_argument("--floor-bin", type=Path, default=None,
                        help="Folder holding the floor's pytest (default: a small venv built once from PyPI)")
    parser.add_argument("--pools", nargs="+", default=["warm", "cold"], choices=["warm", "cold"],
                        help="Run the swerl/clean modes with warm pools planned (warm) and/or without (cold)")
    parser.add_argument("--engine", action="append", default=[],
                        help="Docker engine URL of the fleet (repeat; default: the local engine only)")
    parser.add_argument("--runtime", nargs="+", default=[None],
                        help="OCI runtime(s) of the swerl/clean containers, e.g. runc runsc (default: the engine's)")
    args = parser.parse_args()
    from swerl.trainer.setup.auto import machine_summary

    print("\n".join(machine_summary()), flush=True)
    with tempfile.TemporaryDirectory(prefix="swerl-bench-", ignore_cleanup_errors=True) as tmp:
        source = args.tasks
        if source is None:
            source = Path(tmp) / "humaneval"
            import_humaneval(source, limit=args.limit)
        tasks = list(load_tasks(source, limit=args.limit).tasks)
        image = asyncio.run(_image(tasks[0]))
        bin_dir = (args.floor_bin or floor_python_bin()) if "floor" in args.modes else Path()
        n = len(tasks)
        print(f"{n} HumanEval oracle verifications, image {image}, {os.cpu_count()} x {_cpu_model()}, floor {bin_dir}/pytest, "
              f"runtime {' '.join(r or 'default' for r in args.runtime)}, load average {os.getloadavg()[0]:.1f}", flush=True)
        for c in args.concurrency:
            records: dict[str, list[TrialRecord]] = {}
            totals = asyncio.run(bench(tasks, image, c, args.modes, args.chunk, Path(tmp), bin_dir, args.engine, records,
                                       args.runtime, args.pools))
            floor_slot = totals["floor"][0] * c / n if "floor" in totals else None
            for mode, (wall, ok) in totals.items():
                slots = c * len(args.engine) if mode.split("@")[0].split("/")[0] in VERIFICATION and len(args.engine) > 1 else c
                print(line(mode, n, slots, wall, ok, None if mode == "floor" else floor_slot, records.get(mode)), flush=True)
            if len(args.engine) > 1:
                floor_trial = totals["floor"][0] * c / n if "floor" in totals else None
                for mode, rows in records.items():
                    print("\n".join(engine_lines(mode, rows, floor_trial)), flush=True)
        print(f"load average at the end {os.getloadavg()[0]:.1f}", flush=True)


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or ``unknown CPU``."""
    with contextlib.suppress(OSError):
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                return text.split(":", 1)[1].strip()
    return "unknown CPU"


async def _image(task: Task) -> str:
    async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as mgr:
        return await mgr.image_for(task)


if __name__ == "__main__":
    main()
