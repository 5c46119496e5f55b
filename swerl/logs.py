"""Log output: the plain line format used off a terminal and in ``train.log``, the run's log file,
a heartbeat that says what a long phase is doing when no live display can, and :func:`phase`,
which marks a long phase of library code (image build, model conversion, checkpoint save, export).

A leaf module (standard library only): every stage may call :func:`phase`. What a phase shows is
the display the CLI installs with :func:`set_phase_display` (a live spinner on a terminal);
without one, a phase logs a heartbeat line every ``$SWERL_HEARTBEAT_S`` seconds while it runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType

from swerl.run_layout import RUN_LOG

HEARTBEAT_ENV = "SWERL_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 30.0

log = logging.getLogger("swerl.heartbeat")


def plain_formatter() -> logging.Formatter:
    """``2026-12-01T13:01:02.345Z INFO    swerl.trainer.loop: message``: ISO-8601 UTC, one line per record."""
    formatter = logging.Formatter("%(asctime)s.%(msecs)03dZ %(levelname)-7s %(name)s: %(message)s",
                                  datefmt="%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    return formatter


class HeldRecords(logging.Handler):
    """Keeps every record logged while it is attached to the root logger (:func:`hold_records`),
    for :func:`attach_run_log` to write first: what a command logs before its run directory may be
    written (the preflight's warnings) still reaches ``train.log``; :meth:`take` ends it."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[logging.LogRecord]:
        """Detach from the root logger; returns the records held, oldest first. (Not ``release``:
        ``logging.Handler.handle`` calls ``self.release()`` after every record to free its lock.)"""
        logging.getLogger().removeHandler(self)
        return self.records


def hold_records() -> HeldRecords:
    """Start holding this process's log records (until ``take()``)."""
    held = HeldRecords()
    logging.getLogger().addHandler(held)
    return held


_run_logs: dict[logging.Handler, set[str]] = {}  # open run logs -> the non-propagating loggers routed to them


def attach_run_log(run_dir: Path, earlier: Sequence[logging.LogRecord] = ()) -> logging.Handler:
    """Append every log record of this process to ``RUN_DIR/train.log`` (a resume appends to it),
    after ``earlier`` (records held before the file could be written, :func:`hold_records`).

    Returns: the handler, for :func:`detach_run_log`.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(run_dir / RUN_LOG, mode="a", encoding="utf-8")
    handler.setFormatter(plain_formatter())
    for record in earlier:
        handler.handle(record)
    logging.getLogger().addHandler(handler)
    _run_logs[handler] = set()
    return handler


def detach_run_log(handler: logging.Handler) -> None:
    """Remove and close a handler from :func:`attach_run_log` (from the loggers it was routed to too)."""
    logging.getLogger().removeHandler(handler)
    for name in _run_logs.pop(handler, set()):
        logging.getLogger(name).removeHandler(handler)
    handler.close()



def route_to_run_log(name: str) -> None:
    """Send the records of logger ``name`` to the open run logs too: for a library logger that does
    not propagate to the root (vLLM's, once its engine has configured it), whose lines would
    otherwise reach the terminal but not ``train.log``. A no-op when no run log is open."""
    target = logging.getLogger(name)
    if target.propagate:
        return
    for handler, routed in _run_logs.items():
        if handler not in target.handlers:
            target.addHandler(handler)
            routed.add(name)


def heartbeat_interval_s() -> float:
    """Seconds between heartbeat lines: ``$SWERL_HEARTBEAT_S`` (0 = off), default 30."""
    raw = os.environ.get(HEARTBEAT_ENV)
    try:
        return DEFAULT_HEARTBEAT_S if raw is None else float(raw)
    except ValueError:
        return DEFAULT_HEARTBEAT_S


class Heartbeat:
    """Logs ``status()`` every ``interval_s`` seconds from a daemon thread while the block runs.

    Use it where a live progress display is not drawn (stderr is not a terminal): a CI log of a
    long rollout phase then shows e.g. ``rollouts: 9/16 episodes done, 41 s`` every 30 s.
    ``status`` returns None to skip a beat (nothing running).

    Args:
        status: called on the heartbeat thread; must only read state.
        interval_s: seconds between lines; <= 0 disables the heartbeat.
        enabled: False makes the block a no-op (e.g. on a terminal, where the bar shows progress).
    """

    def __init__(self, status: Callable[[], str | None], interval_s: float, enabled: bool = True) -> None:
        self.status = status
        self.interval_s = interval_s
        self.enabled = enabled and interval_s > 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        if self.enabled:
            self._thread = threading.Thread(target=self._beat, name="swerl-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            line = self.status()
            if line:
                log.info("%s", line)


class PhaseClock:
    """The phase a command is in, its progress and its age, for heartbeat lines.

    ``start("rollouts", total=16, unit="episodes", scope="step 3/10")``, then ``advance()``;
    ``line()`` reads ``step 3/10 rollouts: 9/16 episodes done, 41 s`` (``update: 12 s`` for a
    phase without a count). Library phases running inside it (:func:`nested_display`, e.g. a
    checkpoint save during the step) are named first: ``step 3/10 checkpoint save: 31 s``; a
    counted phase keeps its count after them (``step 3/10 generate (batch of 16): 212/512
    tokens/row done, 40 s; rollouts: 0/16 episodes done, 41 s``). ``note`` adds what the count
    leaves out: ``rollouts: 9/16 episodes done, 5 verifying, 41 s``.
    """

    def __init__(self) -> None:
        self.name: str | None = None
        self.total: int | None = None
        self.unit = ""
        self.scope = ""
        self.done = 0
        self.note = ""
        self.started = time.monotonic()
        self.inner: list[PhaseClock] = []  # library phases running inside this one, oldest first

    def start(self, name: str, total: int | None = None, unit: str = "", scope: str = "") -> None:
        self.name, self.total, self.unit, self.scope = name, total, unit, scope
        self.done, self.note, self.started = 0, "", time.monotonic()

    def advance(self, done: int | None = None) -> None:
        self.done = self.done + 1 if done is None else done

    def line(self) -> str | None:
        if self.name is None:
            return None
        parts = [clock.own_line() for clock in list(self.inner)]
        if not parts or self.total is not None:
            parts.append(self.own_line())
        return (f"{self.scope} " if self.scope else "") + "; ".join(parts)

    def own_line(self) -> str:
        """This phase alone: ``rollouts: 9/16 episodes done, 41 s``."""
        age = f"{time.monotonic() - self.started:.0f} s"
        if self.total is None:
            return f"{self.name}: {age}"
        note = f", {self.note}" if self.note else ""
        return f"{self.name}: {self.done}/{self.total} {self.unit} done{note}, {age}"


PhaseDisplay = Callable[[PhaseClock], AbstractContextManager[object]]
"""Shows one running phase: called with its clock on entry, the context closes with the phase."""


def heartbeat_display(clock: PhaseClock) -> AbstractContextManager[object]:
    """The default display: a heartbeat line (``checkpoint save: 31 s``) every interval while the phase runs."""
    return Heartbeat(clock.line, heartbeat_interval_s())


def nested_display(outer: PhaseClock) -> PhaseDisplay:
    """A display that names each phase inside ``outer`` (a command's own clock) while it runs, so
    the command's one heartbeat says ``step 3/10 checkpoint save: 31 s``, not ``update``."""

    @contextlib.contextmanager
    def show(clock: PhaseClock) -> Iterator[None]:
        outer.inner.append(clock)
        try:
            yield
        finally:
            outer.inner.remove(clock)

    return show


_display: PhaseDisplay = heartbeat_display


def set_phase_display(display: PhaseDisplay | None) -> PhaseDisplay:
    """Install how phases are shown (None: back to :func:`heartbeat_display`); returns the previous one."""
    global _display
    previous, _display = _display, display or heartbeat_display
    return previous


@contextlib.contextmanager
def command_heartbeat(clock: PhaseClock, enabled: bool = True) -> Iterator[None]:
    """A command's heartbeat off a terminal: ``clock.line()`` every ``$SWERL_HEARTBEAT_S`` seconds
    while the block runs, with the library phases started meanwhile named inside it (one heartbeat,
    not one per phase). ``enabled=False`` (a terminal: the bar shows progress) is a no-op."""
    if not enabled:
        yield
        return
    previous = set_phase_display(nested_display(clock))
    try:
        with Heartbeat(clock.line, heartbeat_interval_s()):
            yield
    finally:
        set_phase_display(previous)


@contextlib.contextmanager
def phase(name: str, total: int | None = None, unit: str = "") -> Iterator[PhaseClock]:
    """Mark a long phase: ``with phase("image build swerl-task:ab12", total=5, unit="steps") as clock:``
    (``clock.advance()`` moves the count), or as a decorator, ``@phase("checkpoint save")``.

    The installed display shows it while it runs; one closing INFO line ``NAME: done in 75 s``
    follows a phase that outlived a heartbeat interval. Exceptions pass through unchanged.
    """
    clock = PhaseClock()
    clock.start(name, total, unit)
    with _display(clock):
        yield clock
    age_s = time.monotonic() - clock.started
    interval = heartbeat_interval_s()
    if interval > 0 and age_s >= interval:
        log.info("%s: done in %.0f s", name, age_s)
