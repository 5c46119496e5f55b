"""The ``swerl`` command line: parse input, load config, call one library function, render the
result. One module per command group (``tasks``, ``sandbox``, ``eval``, ``train``, ``select``,
``report``, ``compare``); ``common`` holds what they share. Heavy modules are imported inside each command, so
``swerl --help`` is instant.

Exit codes: 0 ok, 1 failed run, 2 bad input or config, 3 environment (Docker, images).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape

from swerl.cli.common import Backend, Mode, Prefill, Protocol, SwerlCommand, SwerlGroup, err_console, out_console, setup_logging
from swerl.cli.compare import compare_cmd
from swerl.cli.eval import eval_cmd
from swerl.cli.report import report_cmd, view_cmd
from swerl.cli.sandbox import sandbox_app, sandbox_test
from swerl.cli.select import select_checkpoint_cmd
from swerl.cli.tasks import tasks_app
from swerl.cli.train import train_cmd
from swerl.errors import Interrupted, SwerlError

__all__ = ["Backend", "Mode", "Prefill", "Protocol", "app", "main"]

_setup_logging = setup_logging  # the name tests and older callers use

app = typer.Typer(
    name="swerl",
    help="Reinforcement learning of coding agents in Docker sandboxes.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    cls=SwerlGroup,
)
app.add_typer(tasks_app, name="tasks")
app.add_typer(sandbox_app, name="sandbox")
for _name, _command in (("sandbox-test", sandbox_test), ("eval", eval_cmd), ("train", train_cmd),
                        ("select-checkpoint", select_checkpoint_cmd), ("report", report_cmd), ("view", view_cmd),
                        ("compare", compare_cmd)):
    app.command(_name, cls=SwerlCommand)(_command)


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
    setup_logging(verbose)


def main() -> None:
    """Console-script entry: run the app, mapping SwerlError to one stderr line and its exit code.

    A usage error (unknown option, a value outside a flag's choices) is one line naming the
    flag, exit 2, like a config error; ``typer.Exit(n)`` exits n; Ctrl-C exits 130 (a run it
    stopped: one ``interrupted:`` line naming the step reached and the resume command). Any other
    exception is a bug in swerl and keeps its traceback.
    """
    from typer.exceptions import TyperException  # click's exceptions, as typer vendors them

    try:
        code = app(standalone_mode=False)
    except Interrupted as stop:  # after the run's cleanup: where it stopped and how to resume
        err_console.print(f"[bold yellow]interrupted:[/] {escape(' '.join(str(stop).split()))}", highlight=False,
                          soft_wrap=True)
        sys.exit(stop.exit_code)
    except SwerlError as err:
        _error_line(str(err))
        _further_problems(err)
        sys.exit(err.exit_code)
    except typer.Abort:
        sys.exit(130)
    except TyperException as err:  # a usage error: bad option, value outside a flag's choices
        ctx = getattr(err, "ctx", None)
        where = f" (see `{ctx.command_path} -h`)" if ctx is not None else ""
        _error_line(err.format_message().replace(": Value error, ", ": ") + where)  # pydantic's prefix says nothing
        sys.exit(getattr(err, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)


def _further_problems(err: SwerlError) -> None:
    """Under ``-v`` (or SWERL_LOG_LEVEL=DEBUG): one ``also:`` line per further problem of a
    config error (the ``(+N more)`` of its message)."""
    import logging

    if logging.getLogger().isEnabledFor(logging.DEBUG):
        for line in getattr(err, "details", ()):
            err_console.print(f"  [red]also:[/] {escape(' '.join(line.split()))}", highlight=False, soft_wrap=True)


def _error_line(message: str) -> None:
    """One ``error: ...`` line on stderr; the message is plain text, escaped so rich keeps
    square brackets (``swerl[gpu]``) and newlines folded so it stays one line."""
    text = " ".join(message.split())
    err_console.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)
