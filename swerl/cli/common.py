"""What every command shares: the two consoles, logging setup, the shared flags (``-v``,
``--json PATH``, ``--engine``), the enum choices, the ``--json`` writer, and the parse-time checks of
output paths (``--json``, output files, output folders).

Nothing heavy is imported at module level: ``swerl --help`` imports this file.
"""

from __future__ import annotations

import logging
import os
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup, TyperOption

if TYPE_CHECKING:
    import click

# Off a terminal (CI logs, `2> file`) lines are never wrapped at 80 columns.
PLAIN_WIDTH = 240
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else PLAIN_WIDTH)
out_console = Console(width=None if sys.stdout.isatty() else PLAIN_WIDTH)


def setup_logging(verbose: bool = False) -> None:
    """One handler on stderr; level from ``SWERL_LOG_LEVEL`` or ``--verbose``. Without ``--verbose``
    the terminal shows swerl's records, Python warnings and other libraries' errors only; every
    record still reaches a run's ``train.log`` (``swerl.logs.attach_run_log``).

    On a terminal: rich's handler, and a live row per long phase (``swerl.logs.phase``). Off a
    terminal: plain lines with ISO-8601 UTC timestamps, so a CI log or ``2> run.log`` can be read
    and grepped, and a heartbeat line during long phases. Third-party progress bars (Hugging
    Face, tqdm) are off either way: swerl draws its own. Python warnings (``warnings.warn``) are
    log records too (``py.warnings``), so they reach every handler: the terminal and ``train.log``.
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
    if not verbose:  # libraries' records: train.log only, unless -v (an ERROR still shows)
        handler.addFilter(_own_records)
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.captureWarnings(True)
    for noisy in ("urllib3", "docker", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if err_console.is_terminal:  # long phases (swerl.logs.phase) as live rows; off a terminal: heartbeats
        from swerl.cli.progress import install_live_phases

        install_live_phases(err_console)


def _own_records(record: logging.LogRecord) -> bool:
    """What the terminal shows without ``-v``: swerl's records, Python warnings (``warnings.warn``,
    often about the user's own model or data) except a library's deprecation notice about its own
    code (a ``FutureWarning``/``DeprecationWarning`` raised in an installed package, e.g. vLLM
    calling a deprecated torch name: nothing the user can act on), and other libraries' loggers
    (vLLM, transformers, torch) at ERROR and above only; the run's ``train.log`` keeps them all."""
    if record.name == "py.warnings":
        return not _library_deprecation(record.getMessage())
    return record.name == "swerl" or record.name.startswith("swerl.") or record.levelno >= logging.ERROR


def _library_deprecation(text: str) -> bool:
    """Whether a captured warning (``PATH:LINE: Category: message``) is a deprecation notice raised
    in an installed package's file (under ``site-packages``/``dist-packages``)."""
    head = text.split("\n", 1)[0]
    return ("-packages/" in head.split(": ", 1)[0]) and (": FutureWarning: " in head or ": DeprecationWarning: " in head)


def _verbose_callback(value: bool) -> None:
    if value:
        setup_logging(verbose=True)


class _PlainFlags:
    """Help text as written: square brackets are kept (``task.toml [agent]``: the help is escaped
    once, not read as rich markup), and boolean flags show as plain flags in ``-h`` (typer's rich
    help prints an option's metavar in place of its type, ``<bool>`` for a flag, as if it took a
    value; a flag gets an empty one)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        from rich.markup import escape

        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        if getattr(self, "help", None):
            self.help = escape(self.help)
        for param in self.params:  # type: ignore[attr-defined]
            if getattr(param, "help", None):
                param.help = escape(param.help)

    def get_params(self, ctx: click.Context) -> list:
        params = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            _plain_flag(param)
        return params


class SwerlCommand(_PlainFlags, TyperCommand):
    """Every swerl command: ``app.command(name, cls=SwerlCommand)``."""


class SwerlGroup(_PlainFlags, TyperGroup):
    """Every swerl group (``swerl``, ``swerl tasks``, ...): ``typer.Typer(cls=SwerlGroup)``."""


def _plain_flag(param: click.Parameter) -> None:
    if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
        param.metavar = ""


_json_stdout = None  # --json -: the process's real stdout, kept for the JSON alone (claim_stdout_for_json)


def claim_stdout_for_json() -> None:
    """``--json -``: stdout carries the JSON document and nothing else. File descriptor 1 is
    pointed at stderr for the rest of the process (what libraries and child processes print, e.g.
    vLLM's own lines, lands there), and :func:`write_json` writes to the real stdout, kept aside.
    A no-op where ``sys.stdout`` is not fd 1 (an in-process test runner captures it)."""
    global _json_stdout
    if _json_stdout is not None:
        return
    try:
        if sys.stdout.fileno() != 1:
            return
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: a captured stream
        return
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(2, 1)
    _json_stdout = os.fdopen(kept, "w", encoding="utf-8")


def json_path_callback(value: Optional[str]) -> Optional[str]:
    """``--json PATH`` is checked when the command line is parsed, so a run never ends unable to
    write its result: PATH must not be a folder, and its nearest existing parent must be writable.
    ``--json -`` claims stdout for the JSON (:func:`claim_stdout_for_json`)."""
    if value == "-":
        claim_stdout_for_json()
    if value is None or value == "-":
        return value
    path = Path(value).expanduser()
    if path.is_dir():
        raise typer.BadParameter(f"{value} is a folder; pass a file path, e.g. {path / 'result.json'}, or '-'")
    if _unwritable_ancestor(path.absolute().parent) is not None:
        raise typer.BadParameter(f"{value}: {_nearest_existing(path.absolute().parent)} is not a writable folder; "
                                 "pass another path, or '-'")
    return value


def output_file_callback(value: Optional[Path]) -> Optional[Path]:
    """An output FILE option (``report --out``, ``view --out``, ``tasks health --patch``), checked when
    the command line is parsed, before any work: not a folder, and the nearest existing folder above
    it one where a file can be created. Raises typer.BadParameter (one line, exit 2) naming the path."""
    if value is None:
        return value
    path = Path(value).expanduser()
    if path.is_dir():
        raise typer.BadParameter(f"{value} is a folder, not a file; pass another path")
    return _checked_ancestor(value, path.absolute().parent)


def output_folder_callback(value: Optional[Path]) -> Optional[Path]:
    """An output FOLDER option or argument (``train -o``, ``eval --out``, ``tasks import humaneval
    OUT_DIR``, ``--cache-dir``), checked when the command line is parsed, before any work: not an
    existing file, and it (or the nearest existing folder above it) one where a file can be created.
    Raises typer.BadParameter (one line, exit 2) naming the path."""
    if value is None:
        return value
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise typer.BadParameter(f"{value} is a file, not a folder; pass another path")
    return _checked_ancestor(value, path.absolute())


def _checked_ancestor(value: Path, start: Path) -> Path:
    """``value`` when a file can be created in ``start`` or, where ``start`` does not exist yet, in its
    nearest existing ancestor; else typer.BadParameter saying which ancestor is in the way."""
    problem = _unwritable_ancestor(start)
    if problem is not None:
        raise typer.BadParameter(f"{value}: {_nearest_existing(start)} {problem}; pass another path")
    return value


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (what a command writing there would create under)."""
    while not path.exists():  # False too under a file (ENOTDIR)
        path = path.parent
    return path


def _unwritable_ancestor(path: Path) -> Optional[str]:
    """Why nothing can be created at ``path`` (its nearest existing ancestor is a file, or a folder
    where no file can be created), or None when something can."""
    ancestor = _nearest_existing(path)
    if not ancestor.is_dir():
        return "is a file, not a folder"
    if not os.access(ancestor, os.W_OK) or not _can_create_in(ancestor):
        return "is not a writable folder"
    return None


def _can_create_in(folder: Path) -> bool:
    """Whether a file can really be created in ``folder`` (``os.access`` says yes to root in
    /proc or /sys, or on a read-only mount); the probe file is removed at once."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".swerl-probe-"):
            return True
    except OSError:
        return False


# Shared flags: the same name and meaning on every command.
Verbose = Annotated[bool, typer.Option("--verbose", "-v", callback=_verbose_callback, help="Debug logging.")]
JsonOut = Annotated[Optional[str], typer.Option(
    "--json", metavar="PATH", callback=json_path_callback,
    help="Also write the result as JSON to PATH ('-' = stdout; the tables then go to stderr).")]
# Short words: -h puts this help in a column ~20 wide at 80 columns, and cuts a longer word.
_ENGINE_HELP = ("Docker engine URL, e.g. unix:///x.sock or tcp://host:2375; repeat for a fleet. "
                "Default: DOCKER_HOST, else the local socket.")
EngineOption = Annotated[Optional[list[str]], typer.Option("--engine", metavar="URL", help=_ENGINE_HELP)]


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


def swerl_program() -> str:
    """How to call swerl again from this shell, for the commands swerl prints (``next:``, the
    resume line): ``swerl`` when that name on PATH is this program, else this program's path
    (``.venv/bin/swerl``: works without activating the venv), or ``PYTHON -m swerl.cli`` when run
    as a module. Paths under the working folder are relative to it; quoted for a POSIX shell."""
    import shlex
    import shutil

    def shown(path: str) -> str:
        absolute = Path(path).absolute()
        try:
            return shlex.quote(str(absolute.relative_to(Path.cwd())))
        except ValueError:
            return shlex.quote(str(absolute))

    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "swerl" and script.is_file():
        on_path = shutil.which("swerl")
        if on_path is not None and Path(on_path).resolve() == script.resolve():
            return "swerl"
        return shown(str(script))
    return f"{shown(sys.executable)} -m swerl.cli"


def results_console(json_out: str | None) -> Console:
    """Where human-readable results go: stdout, or stderr when ``--json -`` owns stdout."""
    return err_console if json_out == "-" else out_console


def write_json(json_out: str | None, payload: object) -> None:
    """``--json PATH``: the payload as JSON to PATH (atomically: temp file + rename) or stdout for ``-``."""
    import json

    if json_out is None:
        return
    text = json.dumps(payload, indent=2, default=str) + "\n"
    if json_out == "-":
        stream = _json_stdout or sys.stdout
        stream.write(text)
        stream.flush()
        return
    from swerl.fileio import atomic_write_text

    atomic_write_text(Path(json_out), text)


def engine_configs(urls: Optional[list[str]]) -> list:  # noqa: ANN201 - list[EngineConfig], imported lazily
    """``--engine`` values as engine configs (one bad URL: exit 2 naming it)."""
    from pydantic import ValidationError

    from swerl.errors import ConfigError
    from swerl.sandbox.engine_config import EngineConfig

    try:
        return [EngineConfig(url=url) for url in urls or []]
    except ValidationError as err:
        raise ConfigError(f"--engine: {err.errors()[0]['msg']}") from None
