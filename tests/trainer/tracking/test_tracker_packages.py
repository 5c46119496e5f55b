"""A tracker whose package is missing is refused by the dry-run in the words the run would use,
before anything starts (the dry-run once printed a clean plan and the run then failed at start)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from swerl.cli import main
from swerl.errors import EnvironmentProblem
from swerl.trainer.tracking.trackers import MISSING, _import_wandb, check_tracker_packages

ROOT = Path(__file__).resolve().parents[3]
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"


def _hide(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """A forced probe: ``find_spec`` answers None for ``names``, as on a machine without them."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in names else real(name, *a))


@pytest.mark.parametrize("tracker", ["wandb", "mlflow"])
def test_the_dry_run_refuses_a_tracker_whose_package_is_missing(tracker, monkeypatch, tmp_path, capsys):
    _hide(monkeypatch, tracker)
    monkeypatch.setattr("sys.argv", ["swerl", "train", str(DEMO_YAML), "--dry-run", "-o", str(tmp_path / "run"),
                                     "--set", f"data.tasks={FIXTURE_TASKS}", "--set", "data.names=null",
                                     "--set", "loop.train_batch_size=1", "--set", f"logging.{tracker}=true"])
    with pytest.raises(SystemExit) as exited:
        main()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert exited.value.code == 3 and err == [f"error: {MISSING[tracker]}"], err
    assert not (tmp_path / "run").exists()


def test_the_check_and_the_start_say_the_same_and_pass_when_installed(monkeypatch):
    check_tracker_packages(False, False)  # nothing set: nothing needed
    if importlib.util.find_spec("wandb") is not None:  # the dev extra installs both
        check_tracker_packages(True, importlib.util.find_spec("mlflow") is not None)
    _hide(monkeypatch, "wandb")
    with pytest.raises(EnvironmentProblem) as checked:
        check_tracker_packages(True, False)
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(EnvironmentProblem) as started:
        _import_wandb()
    assert str(checked.value) == str(started.value) == MISSING["wandb"]
