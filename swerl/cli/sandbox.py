"""``swerl sandbox`` (build-base, gc, engines) and ``swerl sandbox-test``: the Docker side of swerl."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from swerl.cli.common import (
    EngineOption, JsonOut, SwerlCommand, SwerlGroup, Verbose, engine_configs, err_console, json_path_callback,
    out_console, results_console, write_json,
)
from swerl.text import counted

sandbox_app = typer.Typer(help="Offline base images and sandbox housekeeping.", no_args_is_help=True, cls=SwerlGroup)


def _docker_client(url: Optional[str] = None):  # noqa: ANN202 - docker is imported lazily
    from swerl.sandbox.docker_api import connect

    return connect(url, pool_size=4, timeout_s=120)


@sandbox_app.command("build-base", cls=SwerlCommand)
def sandbox_build_base(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the image exists.")] = False,
    verbose: Verbose = False,
    engine: EngineOption = None,
) -> None:
    """Build the offline Debian Python base image and tag it as python:3.10/3.11/3.12-slim when absent.

    With --engine, on each engine named: copied from the local engine when it has the image, else built there."""
    from swerl.sandbox.deployment.images import build_base_image

    urls = [e.url for e in engine_configs(engine)] or [None]
    local = None
    if urls != [None]:
        from swerl.errors import EnvironmentProblem

        try:
            local = _docker_client()
        except EnvironmentProblem:
            local = None
    for url in urls:
        tag, tagged = build_base_image(_docker_client(url), force=force, url=url, source=local)
        where = f" on {url}" if url else ""
        out_console.print(f"{tag} ready{where}" + (f"; tagged {', '.join(tagged)}" if tagged else ""), highlight=False)


@sandbox_app.command("gc", cls=SwerlCommand)
def sandbox_gc(
    all_: Annotated[bool, typer.Option("--all", help="Remove every swerl container, not only dead runs'.")] = False,
    images: Annotated[bool, typer.Option("--images", help="Also remove cached swerl-task:* images.")] = False,
    json_out: JsonOut = None,
    verbose: Verbose = False,
    engine: EngineOption = None,
) -> None:
    """Remove containers, networks and volumes left by dead swerl runs (labelled swerl.run), on every engine named."""
    from swerl.sandbox.deployment.gc import collect_garbage, remove_task_images

    console, records = results_console(json_out), []
    for url in [e.url for e in engine_configs(engine)] or [None]:
        client = _docker_client(url)
        removed = collect_garbage(client, everything=all_)
        if images:
            removed["images"] = remove_task_images(client)
        records.append({"engine": url or "local", "removed": removed})
        where = f" on {url}" if url else ""
        console.print(", ".join(f"{n} {kind}" for kind, n in removed.items()) + f" removed{where}", highlight=False)
    write_json(json_out, records)


@sandbox_app.command("engines", cls=SwerlCommand)
def sandbox_engines(engine: EngineOption = None, json_out: JsonOut = None, verbose: Verbose = False) -> None:
    """One row per engine: reachable, version, swerl slots in use, containers, images, free disk."""
    from rich.table import Table

    from swerl.sandbox.engine_config import EngineConfig
    from swerl.sandbox.deployment.status import engine_status

    rows = [engine_status(e) for e in engine_configs(engine) or [EngineConfig.model_construct(url=None, slots=None, tls=None)]]
    table = Table(title="Docker engines")
    for column in ("engine", "reachable", "version", "slots in use", "swerl containers", "containers",
                   "images", "task images", "disk free MiB"):
        table.add_column(column, justify="left" if column in ("engine", "version") else "right")
    for row in rows:
        def show(value: object) -> str:
            return "-" if value is None else str(value)

        table.add_row(row.url, "yes" if row.reachable else "NO", show(row.version), show(row.slots_in_use),
                      show(row.swerl_containers), show(row.containers), show(row.images), show(row.task_images),
                      show(row.disk_free_mb))
    results_console(json_out).print(table)
    write_json(json_out, [row.model_dump(mode="json") for row in rows])
    for row in rows:
        if not row.reachable:
            err_console.print(f"{row.url}: {row.error}", highlight=False, soft_wrap=True)
    if not all(row.reachable for row in rows):
        from swerl.errors import EnvironmentProblem

        raise EnvironmentProblem(f"{sum(not r.reachable for r in rows)} of {counted(len(rows), 'engine')} unreachable")


def sandbox_test(
    tasks: Annotated[Optional[Path], typer.Argument(
        help="A task folder, a folder of tasks, or a .parquet/.jsonl dataset (or --config).")] = None,
    train_config: Annotated[Optional[Path], typer.Option(
        "--config", metavar="TRAIN_YAML", help="Test the tasks a swerl train config trains and evaluates on "
        "(data.tasks, data.names, data.exclude, data.limit and the eval section), not a whole folder.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", metavar="KEY=VALUE", help="With --config: override a field of it, dotted.key=YAML value "
        "(repeatable).")] = None,
    concurrency: Annotated[
        Optional[int], typer.Option("--concurrency", "-c", min=1, help="Sandboxes at once (default: CPU count).")
    ] = None,
    json_out: Annotated[Optional[str], typer.Option("--json", metavar="PATH", callback=json_path_callback, help=(
        "Write one record per trial (JSON list) to PATH ('-' = stdout); red-team records carry \"forged\"."))] = None,
    allow_network: Annotated[
        bool, typer.Option("--allow-network", help="Grant the public network to the task phases that ask for it "
                           "(network_mode = \"public\", or allow_internet = true); a task asking for an allowlist "
                           "is then refused (swerl cannot enforce one).")
    ] = False,
    warm_pool: Annotated[bool, typer.Option("--warm-pool/--no-warm-pool", help="Pre-start containers.")] = True,
    redteam: Annotated[bool, typer.Option(
        "--redteam", help="Also run the built-in exploit attempts (docs/redteam.md) on every task; "
        "a task that gives any of them reward > 0 is FORGEABLE, one where any of them ends masked is "
        "ESCAPABLE (exit 1).")] = False,
    runtime: Annotated[Optional[str], typer.Option(
        "--runtime", metavar="NAME", help="OCI runtime of the sandboxes (e.g. runsc, crun), registered with the "
        "engine; default: the engine's (runc).")] = None,
    verbose: Verbose = False,
    engine: EngineOption = None,
) -> None:
    """Run each task's oracle (expect reward 1) and a null attempt (expect reward 0) in fresh sandboxes."""
    from swerl.cli.progress import new_progress, phases_into
    from swerl.logs import PhaseClock, command_heartbeat
    from swerl.sandbox import SandboxConfig
    from swerl.sandbox.selftest import run_sandbox_test, trial_attempts
    from swerl.sandbox.signals import run_async

    task_set = _tasks_to_test(tasks, train_config, set_ or [])
    config = SandboxConfig(allow_network=allow_network, warm_pool=warm_pool, engines=engine_configs(engine),
                           runtime=runtime or None, **({"concurrency": concurrency} if concurrency else {}))
    attempts = ()
    if redteam:
        from swerl.agent.redteam import CATALOGUE

        attempts = CATALOGUE
    trials = sum(len(trial_attempts(t, attempts)) for t in task_set.tasks)
    progress = new_progress(err_console)
    clock = PhaseClock()
    clock.start("sandbox-test", total=trials, unit="trials")

    def on_trial(record) -> None:  # noqa: ANN001 - TrialRecord
        clock.advance()
        progress.update(bar, advance=1, status=f"{record.task}/{record.attempt}: {record.outcome.value}")

    with progress, phases_into(progress), command_heartbeat(clock, enabled=not err_console.is_terminal):
        bar = progress.add_task("sandbox-test", total=trials, status="")
        report = run_async(run_sandbox_test(task_set.tasks, config, redteam=attempts, on_trial=on_trial))
    _report_sandbox_test(report, task_set, str(tasks or train_config), {a.name: a.kind for a in attempts}, json_out)


def _tasks_to_test(tasks: Path | None, path: Path | None, sets: list[str]):  # noqa: ANN202 - TaskSet
    """The tasks of ``tasks``, or those ``swerl train PATH`` would train and evaluate on, selected
    as its preflight does (``data.names``/``data.exclude``/``data.limit``, ``eval.names``/``eval.limit``),
    as one TaskSet (a held-out task that is also a training task once). ConfigError for both or neither."""
    from swerl.errors import ConfigError
    from swerl.tasks.exclude import load_without_excluded
    from swerl.tasks.load import TaskSet, load_tasks
    from swerl.trainer.config import load_train_config

    if (tasks is None) == (path is None):
        raise ConfigError("sandbox-test: pass a task source (TASKS) or a train config (--config TRAIN_YAML), not "
                          f"{'both' if tasks is not None else 'neither'}")
    if tasks is not None:
        return load_tasks(tasks, on_error="skip")
    cfg = load_train_config(path, sets)
    train, _ = load_without_excluded(cfg.data.tasks, limit=cfg.data.limit, names=cfg.data.names,
                                     exclude=cfg.data.exclude)
    held_out = [] if cfg.eval is None else list(load_tasks(cfg.eval.tasks, limit=cfg.eval.limit, names=cfg.eval.names,
                                                           names_field="eval.names").tasks)
    seen = {task.name for task in train}
    return TaskSet(source=Path(cfg.data.tasks), tasks=(*train, *(t for t in held_out if t.name not in seen)),
                   problems=())


def _report_sandbox_test(report, task_set, tasks: str, kinds: dict[str, str], json_out: str | None) -> None:  # noqa: ANN001
    """The JSON records, the tables, one BROKEN/FORGEABLE/ESCAPABLE line per bad task; RunFailed (exit 1) if any."""
    from swerl.sandbox.selftest import BrokenTask

    broken = [BrokenTask(task=p.path, reason=p.reason) for p in task_set.problems] + report.broken
    write_json(json_out, _trial_rows(report))
    console = results_console(json_out)
    _print_sandbox_test_tables(report, tasks, kinds, console)
    ok_tasks = len(task_set.tasks) - len(report.broken)
    console.print(f"{ok_tasks}/{len(task_set.tasks)} tasks behave (oracle reward 1, null reward 0)", highlight=False)
    if kinds:
        console.print(f"{len(report.forgeable)}/{len(task_set.tasks)} tasks forgeable, {len(report.escapable)}/"
                      f"{len(task_set.tasks)} escapable by the red team ({counted(len(kinds), 'attempt')})", highlight=False)
    for item in broken:
        console.print(f"BROKEN {item.task}: {item.reason}", highlight=False, soft_wrap=True)
    for item in report.forgeable:
        console.print(f"FORGEABLE {item.task}: {', '.join(item.attempts)}", highlight=False, soft_wrap=True)
    for item in report.escapable:
        console.print(f"ESCAPABLE {item.task}: {', '.join(item.attempts)}", highlight=False, soft_wrap=True)
    for record in (r for r in report.records if r.tamper and r.attempt in ("oracle", "null")):
        # An honest attempt with tamper reasons: the task's own solution touches the verifier's
        # territory, or a rule is wrong; either way its author should look.
        console.print(f"FLAGGED {record.task}/{record.attempt}: {'; '.join(record.tamper[:3])}", highlight=False,
                      soft_wrap=True)
    if broken or report.forgeable or report.escapable:
        from swerl.errors import RunFailed

        raise RunFailed(f"{counted(len(broken), 'task')} broken, {len(report.forgeable)} forgeable, "
                        f"{len(report.escapable)} escapable; see the BROKEN/FORGEABLE/ESCAPABLE lines above")


def _print_sandbox_test_tables(report, tasks: str, kinds: dict[str, str], console: Console) -> None:  # noqa: ANN001
    """Outcome counts per attempt column; with the red team, also tasks forged and escaped per attempt."""
    from rich.table import Table

    from swerl.sandbox.selftest import ATTEMPTS, REDTEAM

    counts = report.counts()
    columns = [*ATTEMPTS, *([REDTEAM] if kinds else [])]
    # A table title wraps to the table's width, so the run id (the label on its containers) gets a line.
    console.print(f"sandbox-test {tasks} (run {report.run_id})", highlight=False, soft_wrap=True)
    table = Table(title="trial outcomes per attempt")
    table.add_column("outcome")
    for column in columns:
        table.add_column(column, justify="right")
    for outcome in sorted({o for c in counts.values() for o in c}):
        table.add_row(outcome, *(str(counts.get(c, {}).get(outcome, 0)) for c in columns))
    console.print(table)
    tamper = report.tamper_counts()
    console.print("trials with tamper reasons: " + ", ".join(
        f"{c} {tamper[c][0]}/{tamper[c][1]}" for c in columns if c in tamper), highlight=False)
    if kinds:
        forged, escaped, flagged = report.forged_counts(), report.escaped_counts(), report.flagged_counts()
        attempts = Table(title="red-team attempts (tasks forged: reward > 0; escaped: trial masked; flagged: with "
                         "tamper reasons)")
        for name, justify in (("attempt", "left"), ("kind", "left"), ("forged", "right"), ("escaped", "right"),
                              ("flagged", "right")):
            attempts.add_column(name, justify=justify)
        for name in report.attempts:
            attempts.add_row(name, kinds.get(name, ""), str(forged[name]), str(escaped[name]), str(flagged[name]))
        console.print(attempts)


def _trial_rows(report) -> list[dict]:  # noqa: ANN001 - SandboxTestReport
    """One JSON record per trial; red-team records get ``"forged"`` (reward > 0; on a task trained
    under ``agent.on_tamper: zero``, with no tamper reason) and ``"escaped"`` (masked)."""
    from swerl.sandbox.redteam import PREFIX, is_escaped

    forged = {(f.task, PREFIX + name) for f in report.forgeable for name in f.attempts}
    rows = []
    for record in report.records:
        row = record.model_dump(mode="json")
        if record.attempt.startswith(PREFIX):
            row["forged"], row["escaped"] = (record.task, record.attempt) in forged, is_escaped(record)
        rows.append(row)
    return rows
