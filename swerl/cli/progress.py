"""Live progress on a terminal: the columns every swerl bar shares, and the display of the long
phases that library code marks with :func:`swerl.logs.phase` (image build, model conversion,
checkpoint save, export).

rich draws one live display at a time, so a phase started while a command's own bar is live
(train steps, eval episodes, sandbox-test trials) becomes one more row of that bar's Progress;
otherwise it gets a transient Progress of its own that disappears when the last phase ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from swerl.logs import PhaseClock, set_phase_display


class CountColumn(ProgressColumn):
    """``done/total`` of a bar (blank while its total is unknown); a phase row shows its clock's count."""

    def render(self, task: Task) -> Text:
        clock = task.fields.get("clock")
        if clock is not None:
            shown = "" if clock.total is None else f"{clock.done}/{clock.total} {clock.unit}".rstrip()
        else:
            shown = "" if task.total is None else f"{int(task.completed)}/{int(task.total)}"
        return Text(shown, style="progress.download")


def columns() -> list[ProgressColumn]:
    """Name, bar (pulsing while the total is unknown), count, elapsed, status: one layout for every bar."""
    return [TextColumn("[bold]{task.description}[/]"), BarColumn(), CountColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[status]}")]


def new_progress(console: Console) -> Progress:
    """A Progress with :func:`columns` on ``console`` (rows stay when it stops); off a terminal it
    draws nothing, not even the final frame rich prints on stop (the heartbeat lines say it there)."""
    return Progress(*columns(), console=console, transient=False,
                    disable=not console.is_terminal or console.is_dumb_terminal)


class LivePhases:
    """The phase display of a terminal: each phase a row, in the live Progress or in one of its own."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._lock = threading.Lock()
        self._live: Progress | None = None  # the Progress rows go to
        self._owned = False  # whether this display started it (and stops it)
        self._rows = 0

    @contextlib.contextmanager
    def attach(self, progress: Progress) -> Iterator[None]:
        """While the block runs, phases are rows of ``progress`` (a command's own live bar)."""
        with self._lock:
            previous, self._live, owned, self._owned = self._live, progress, self._owned, False
        try:
            yield
        finally:
            with self._lock:
                self._live, self._owned = previous, owned

    @contextlib.contextmanager
    def __call__(self, clock: PhaseClock) -> Iterator[None]:
        with self._lock:
            if self._live is None:
                self._live, self._owned = Progress(*columns(), console=self.console, transient=True), True
                self._live.start()
            progress, self._rows = self._live, self._rows + 1
            row = progress.add_task(clock.name or "", total=None, clock=clock, status="")
        try:
            yield
        finally:
            with self._lock:
                progress.remove_task(row)
                self._rows -= 1
                if self._owned and self._rows == 0 and self._live is progress:
                    progress.stop()
                    self._live, self._owned = None, False


_installed: LivePhases | None = None


def install_live_phases(console: Console) -> None:
    """Show :func:`swerl.logs.phase` phases as live rows on ``console`` (a terminal)."""
    global _installed
    if _installed is None or _installed.console is not console:
        _installed = LivePhases(console)
    set_phase_display(_installed)


def phases_into(progress: Progress) -> contextlib.AbstractContextManager[None]:
    """While a command's bar is live, phases become its rows (a no-op off a terminal)."""
    return _installed.attach(progress) if _installed is not None else contextlib.nullcontext()


class RolloutTally:
    """Episodes of a collection as they move: running (agent acting), verifying (tests running),
    done, passed and masked, from ``swerl.agent.collect.RolloutEvent`` s."""

    def __init__(self) -> None:
        self.running: set[tuple[str, int]] = set()
        self.verifying: set[tuple[str, int]] = set()
        self.passed = self.masked = 0

    def observe(self, event) -> None:  # noqa: ANN001 - RolloutEvent
        key = (event.task_name, event.sample_index)
        if event.kind == "started":
            self.running.add(key)
        elif event.kind == "verifying":
            self.running.discard(key)
            self.verifying.add(key)
        else:
            self.running.discard(key)
            self.verifying.discard(key)
            self.passed += event.trajectory.outcome == "passed"
            self.masked += event.trajectory.failure_class == "mask"

    def status(self) -> str:
        """``running 3  verifying 5  passed 2  masked 0``."""
        return (f"running {len(self.running)}  verifying {len(self.verifying)}  passed {self.passed}  "
                f"masked {self.masked}")
