"""``swerl tasks mine PROJECT OUT_DIR``: a pure-Python project with a pytest suite becomes verified
method tasks (docs/tasks.md, Mining tasks from a project).

The steps: unpack and clean the project; run its suite twice in a sandbox with the call tracer;
write a task per function with stable covering tests (:mod:`swerl.tasks.mine`); run each task's
oracle and null attempt in sandboxes (as ``sandbox-test``); drop the broken ones; write the manifest.
The sandbox steps live here, on the floor that may join the tasks and sandbox stages.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from swerl.cli.common import (
    EngineOption, JsonOut, SwerlCommand, Verbose, engine_configs, err_console, output_folder_callback, results_console,
    write_json,
)

ON_TAMPER_LINE = "agent.on_tamper: zero"
TRACE_TASK_TOML = """\
schema_version = "1.3"

[environment]
cpus = 1.0
memory_mb = 4096
network_mode = "no-network"
"""


def tasks_mine(
    project: Annotated[Path, typer.Argument(help="The project: a folder, an sdist (.tar.gz, .zip) or a wheel, with a "
                                                 "pytest suite and no dependency beyond the standard library.")],
    out_dir: Annotated[Path, typer.Argument(callback=output_folder_callback, help=(
        "Folder to write the task folders and manifest.json into (several projects may share it)."))],
    concurrency: Annotated[Optional[int], typer.Option(
        "--concurrency", "-c", min=1, help="Sandboxes at once while proving the tasks (default: CPU count).")] = None,
    prove: Annotated[bool, typer.Option(
        "--prove/--no-prove", help="Run each task's oracle (must score 1) and null attempt (must score 0) and drop "
        "the broken ones; --no-prove leaves the tasks unproven (kept in the manifest as written).")] = True,
    limit: Annotated[Optional[int], typer.Option(
        min=1, help="Write at most N tasks (candidates in file order); the rest are dropped as 'limit'.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite task folders that already exist.")] = False,
    json_out: JsonOut = None,
    verbose: Verbose = False,
    engine: EngineOption = None,
) -> None:
    """Mine verified pymethods2test tasks from a project's own tests: one task per function or method that
    stable tests call, its body stubbed in /app, those tests hidden; prints the counts kept and dropped."""
    from swerl.sandbox import SandboxConfig
    from swerl.sandbox.signals import run_async
    from swerl.sandbox.tamper.scan import static_in_process_reasons
    from swerl.tasks.mine.pipeline import prepare, settle, write_tasks

    config = SandboxConfig(engines=engine_configs(engine), **({"concurrency": concurrency} if concurrency else {}))
    with tempfile.TemporaryDirectory(prefix="swerl-mine-") as work:
        prepared = prepare(project, Path(work))  # a bad PROJECT stops here, before OUT_DIR exists
        out_dir.mkdir(parents=True, exist_ok=True)
        err_console.print(f"running the suite of {prepared.name} twice in a sandbox with the call tracer", highlight=False)
        runs = run_async(trace_suite(prepared, Path(work), config))
        run, entries = write_tasks(prepared, runs, out_dir, force=force, limit=limit, screen=static_in_process_reasons)
    written = [e.task for e in entries if e.status == "kept" and e.task]
    broken: dict[str, str] = {}
    if prove and written:
        err_console.print(f"proving {len(written)} tasks: oracle and null attempt of each", highlight=False)
        broken = run_async(prove_tasks([out_dir / name for name in written], config, err_console.print))
    manifest = settle(out_dir, run, entries, broken)
    counts = manifest.family_counts(prepared.name)
    console = results_console(json_out)
    drops = ", ".join(f"{n} {family}" for family, n in counts.most_common() if family != "kept")
    console.print(f"{prepared.name}: {counts['kept']} tasks kept in {out_dir}{'' if prove else ' (unproven)'}; "
                  f"dropped: {drops or 'none'}; {len(run.flaky)} flaky tests left out", highlight=False, soft_wrap=True)
    harnesses = Counter(e.metadata.get("harness", "in-process") for e in manifest.entries
                        if e.project == prepared.name and e.status == "kept")
    console.print(f"harness: {harnesses['isolated']} isolated (the judge never imports the solution), "
                  f"{harnesses['in-process']} in-process (the tests import the project in pytest's process)"
                  + (f": train on these tasks with `{ON_TAMPER_LINE}` (--set agent.on_tamper=zero)"
                     if harnesses["in-process"] else ""), highlight=False, soft_wrap=True)
    console.print(f"manifest: {out_dir / 'manifest.json'} (every function kept or dropped, with why); next: "
                  f"swerl sandbox-test {out_dir} --redteam", highlight=False, soft_wrap=True)
    write_json(json_out, {"project": prepared.name, "out_dir": str(out_dir), "kept": counts["kept"],
                          "dropped": {k: v for k, v in counts.items() if k != "kept"}, "flaky": run.flaky,
                          "harness": dict(harnesses), "on_tamper": "zero" if harnesses["in-process"] else None,
                          "manifest": str(out_dir / "manifest.json")})


async def trace_suite(prepared, work: Path, config) -> list:  # noqa: ANN001 - Prepared, SandboxConfig -> list[Trace]
    """Run the project's suite twice in one sandbox (python:3.10-slim + pytest, no network) with the
    call tracer; returns the two traces.

    Raises:
        TaskError: (exit 2) the suite wrote no trace (it could not start: a missing dependency, a broken config).
    """
    from swerl.errors import TaskError
    from swerl.sandbox import SandboxManager
    from swerl.tasks.load import load_task
    from swerl.tasks.mine.candidates import Trace
    from swerl.tasks.mine.pipeline import PLUGIN, SUITE_TIMEOUT_S, TRACE_OUT, trace_command
    from swerl.tasks.pytask import DOCKERFILE

    folder = work / "trace-task"
    for rel, text in {"instruction.md": "Run the suite.\n", "task.toml": TRACE_TASK_TOML,
                      "environment/Dockerfile": DOCKERFILE, "tests/test.sh": "#!/bin/bash\nexit 0\n"}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")
    runs = []
    async with SandboxManager(config) as mgr, mgr.sandbox(load_task(folder, name=f"mine-trace-{prepared.name}")) as sb:
        await sb.upload_dir(prepared.root, "/app")
        await sb.write_file("/swerl_trace/swerl_trace.py", PLUGIN.read_bytes())
        for run in (1, 2):
            result = await sb.exec(trace_command(prepared, run), timeout_s=SUITE_TIMEOUT_S)
            try:
                data = json.loads(await sb.read_file(f"{TRACE_OUT}.{run}"))
            except Exception as err:  # noqa: BLE001 - no file or no JSON: the suite did not run
                raise TaskError(f"{prepared.source}: the suite wrote no trace in the sandbox ({err}); its output ends: "
                                f"{result.output[-400:]!r}") from None
            runs.append(Trace.from_json(data))
    return runs


async def prove_tasks(task_dirs: list[Path], config, say: Callable[[str], None]) -> dict[str, str]:  # noqa: ANN001
    """Each task's oracle and null attempt in fresh sandboxes (``sandbox-test``); returns task -> why it
    is dropped, for the tasks that are broken."""
    from swerl.sandbox.selftest import run_sandbox_test
    from swerl.tasks.load import load_task
    from swerl.tasks.mine.pipeline import proof_reason

    tasks = [load_task(d) for d in task_dirs]
    done = [0]

    def on_trial(record) -> None:  # noqa: ANN001 - TrialRecord
        done[0] += 1
        if done[0] % 20 == 0 or done[0] == 2 * len(tasks):
            say(f"  {done[0]}/{2 * len(tasks)} trials")

    report = await run_sandbox_test(tasks, config, on_trial=on_trial)
    trials = {(r.task, r.attempt): (r.outcome.value, r.reward, r.detail) for r in report.records}
    tamper = {r.task: r.tamper for r in report.records if r.attempt == "oracle"}
    reasons = {t.name: proof_reason(trials.get((t.name, "oracle")), trials.get((t.name, "null")), tamper.get(t.name))
               for t in tasks}
    return {name: why for name, why in reasons.items() if why}
