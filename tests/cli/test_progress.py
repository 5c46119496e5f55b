"""Live rows on a terminal for the long phases library code marks with swerl.logs.phase."""

from __future__ import annotations

import io
import threading
import time

from rich.console import Console

from swerl.cli.progress import LivePhases, new_progress
from swerl.logs import phase, set_phase_display


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=120, color_system=None), out


def _with(display: LivePhases):  # noqa: ANN202
    class Installed:
        def __enter__(self):  # noqa: ANN204
            self.previous = set_phase_display(display)

        def __exit__(self, *exc):  # noqa: ANN002, ANN204
            set_phase_display(self.previous)

    return Installed()


def test_a_phase_alone_gets_a_transient_row_with_its_count():
    console, out = _terminal()
    display = LivePhases(console)
    with _with(display), phase("image build swerl-task:ab", unit="steps") as clock:
        clock.done, clock.total = 2, 5
        time.sleep(0.3)  # rich refreshes 10 times a second
        assert display._live is not None and display._live.live.is_started
    assert display._live is None  # stopped with the last phase
    assert "image build swerl-task:ab" in out.getvalue() and "2/5 steps" in out.getvalue()


def test_phases_during_a_commands_bar_are_rows_of_that_bar():
    console, out = _terminal()
    display = LivePhases(console)
    with new_progress(console) as progress, display.attach(progress), _with(display):
        progress.add_task("step 3/10", total=16, status="update")
        with phase("checkpoint save"):
            assert [t.description for t in progress.tasks] == ["step 3/10", "checkpoint save"]
            time.sleep(0.15)
        assert [t.description for t in progress.tasks] == ["step 3/10"]
    assert "checkpoint save" in out.getvalue()


def test_phases_on_two_threads_share_one_live_display():
    console, _ = _terminal()
    display = LivePhases(console)
    errors = []

    def build(name: str) -> None:
        try:
            with phase(name):
                time.sleep(0.2)
        except Exception as err:  # noqa: BLE001 - rich's LiveError would land here
            errors.append(err)

    with _with(display):
        threads = [threading.Thread(target=build, args=(f"image build {i}",)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == [] and display._live is None


def test_off_a_terminal_a_bar_draws_nothing_not_even_its_last_frame():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=120)
    with new_progress(console) as progress:
        bar = progress.add_task("step 1/2", total=4, status="rollouts")
        progress.update(bar, completed=4, status="done")
    assert out.getvalue() == ""


def test_the_rollout_heartbeat_counts_episodes_at_their_verifier():
    from swerl.agent.collect import RolloutEvent
    from swerl.agent.trajectory import Trajectory
    from swerl.cli.progress import RolloutTally
    from swerl.logs import PhaseClock

    tally, clock = RolloutTally(), PhaseClock()
    clock.start("rollouts", total=3, unit="episodes", scope="step 1/2")
    for i in range(3):
        tally.observe(RolloutEvent("started", "t", i, 0, 3))
    tally.observe(RolloutEvent("verifying", "t", 0, 0, 3))
    tally.observe(RolloutEvent("verifying", "t", 1, 0, 3))
    tally.observe(RolloutEvent("finished", "t", 0, 1, 3, Trajectory(task_name="t", group_id="g", prompt_ids=[1], outcome="passed")))
    clock.advance(1)
    clock.note = f"{len(tally.verifying)} verifying"
    assert tally.status() == "running 1  verifying 1  passed 1  masked 0"
    assert clock.line() == "step 1/2 rollouts: 1/3 episodes done, 1 verifying, 0 s"
