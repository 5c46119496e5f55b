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
# (commands: `swerl tasks import`, `swerl tasks validate`)


# --- sandbox -----------------------------------------------------------------
# (commands: `swerl sandbox build-base`, `swerl sandbox gc`, `swerl sandbox-test`)


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
    """Console-script entry: run the app, mapping SwerlError to one stderr line and its exit code."""
    try:
        app(standalone_mode=False)
    except SwerlError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
        sys.exit(err.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as err:  # click usage errors keep their exit code 2
        import click

        if isinstance(err, click.exceptions.ClickException):
            err.show()
            sys.exit(err.exit_code)
        if isinstance(err, click.exceptions.Exit):
            sys.exit(err.exit_code)
        raise


if __name__ == "__main__":
    main()
