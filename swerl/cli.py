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
