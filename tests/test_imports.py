"""The import graph of swerl/ points down the data flow and has no circle.

Every ``import`` / ``from ... import`` statement of swerl/ counts: at module level (inside
``if TYPE_CHECKING:`` too) and inside functions (lazy imports). Modules sit on floors, lowest first:

    leaves (errors, fields, fileio, logs, text, run_layout, metric_keys; the package root): import no stage
    tasks -> sandbox -> inference -> agent -> rl -> selection -> task_health -> trainer -> report -> cli

A module may import its own floor or a lower one, never a higher one. ``agent`` and
``inference`` are the one stage pair of the flow: the agent's policy calls an inference backend,
never the reverse. ``selection.py`` reads a run's files only (no trainer import), so it sits under
the trainer, whose eval-from-run resolves the picked export; so does ``task_health.py``, the task
ledger the trainer's quarantine keeps and ``swerl tasks health`` reads back: ``report/`` imports
nothing of the trainer or the sandboxes (the command that re-checks verifiers runs them). Inside ``sandbox/`` the rooms have
floors too: the ground floor (types, engine settings, the Docker wire and API, signals) ->
``runtime/`` (and ``tamper/`` beside it: the scan reads a container's layer, the runtime calls
the scan) -> ``deployment/`` -> the modules that join them (manager, network, red team,
self-test, control runs, the package's ``__init__``). Inside ``inference/``: the ground floor
(config, model files, the machine probe, RNG state, the gather of a sharded tensor) -> ``backends/`` (the contract, HF,
OpenAI-compatible, the batcher) -> ``engines/`` (vLLM in process and as servers) ->
``weight_sync/`` -> the modules that join them (factory, parity probe, the package's ``__init__``).
``trainer/``'s rooms stand on floors too: the ground floor (``config``, whose sections include
``model_config`` and ``sections``, the ``colocation`` rule; ``distributed``: ranks and collectives) ->
``tracking/`` -> ``policy/`` -> ``step/`` (the KL reference beside the update) -> ``rollouts/`` (the
quarantine and the sandbox limits per rank beside the sampler) -> ``persistence/`` -> ``setup/`` (the
plan sizes a run's rollouts and checkpoints) -> the modules that join them (loop, eval from a run,
the package's ``__init__``). Any two modules importing each other, directly or through others,
fail as a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEAVES = ("swerl", "swerl.errors", "swerl.fields", "swerl.fileio", "swerl.logs", "swerl.text", "swerl.run_layout",
          "swerl.metric_keys")
STAGES = ("tasks", "sandbox", "inference", "agent", "rl", "selection", "task_health", "trainer", "report", "cli")
# Stages whose rooms stand on floors: (rooms between the ground floor and the joining modules,
# lowest first; the joining modules at the stage's root; rooms on the floor of another).
ROOMS = {
    "sandbox": (("runtime", "deployment"), ("manager", "network", "redteam", "redteam_engine", "selftest", "control"),
                {"tamper": "runtime"}),  # the tamper scan reads a container's layer
    "inference": (("backends", "engines", "weight_sync"), ("factory", "probe"), {}),
    "trainer": (("tracking", "policy", "step", "rollouts", "persistence", "setup"), ("loop", "eval_from_run"), {}),
}


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path = ROOT) -> dict[str, Path]:
    return {_module_name(root, path): path for path in sorted((root / "swerl").rglob("*.py"))}


def _imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, imported swerl module) of every import statement in one module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:  # `from swerl.x import y` names the module y when y is one
                found.append((node.lineno, f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base))
    return sorted({(line, target) for line, target in found if target == "swerl" or target.startswith("swerl.")})


def _graph(root: Path = ROOT) -> dict[str, list[tuple[int, str]]]:
    known = _modules(root)
    return {name: _imports(name, path, known) for name, path in known.items()}


def _floor(module: str) -> tuple[int, int]:
    """(floor of the flow, floor inside the stage); leaves are (0, 0)."""
    if module in LEAVES:
        return (0, 0)
    parts = module.split(".")
    stage = STAGES.index(parts[1]) + 1
    if parts[1] not in ROOMS:
        return (stage, 0)
    rooms, top, beside = ROOMS[parts[1]]
    if len(parts) == 2:  # the package's __init__ joins its rooms
        return (stage, len(rooms) + 1)
    room = beside.get(parts[2], parts[2])
    if room in rooms:
        return (stage, rooms.index(room) + 1)
    return (stage, len(rooms) + 1 if parts[2] in top else 0)


def _against(root: Path = ROOT) -> list[str]:
    """``file:line imports module`` for every import that points up the flow."""
    paths = _modules(root)
    return [f"{paths[module].relative_to(root)}:{line} imports {target}"
            for module, edges in _graph(root).items() for line, target in edges if _floor(target) > _floor(module)]


def _circles(root: Path = ROOT) -> list[str]:
    """One ``a -> b -> a`` line per circle a depth-first walk closes."""
    graph = {module: sorted({t for _, t in edges if t != module}) for module, edges in _graph(root).items()}
    circles, state = [], {}

    def visit(module: str, trail: list[str]) -> None:  # a module met again while still open closes a circle
        state[module] = "open"
        for target in graph.get(module, []):
            if state.get(target) == "open":
                circles.append(" -> ".join(trail[trail.index(target):] + [target]))
            elif target not in state:
                visit(target, trail + [target])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])
    return circles


def test_every_module_has_a_floor():
    unplaced = [m for m in _modules() if m not in LEAVES and m.split(".")[1] not in STAGES]
    assert not unplaced, f"modules on no floor (add them to LEAVES or STAGES in {Path(__file__).name}): {unplaced}"


def test_every_room_has_a_floor():
    """Each sub-folder of a stage with floors is named in ROOMS (a new room gets a floor on purpose)."""
    for stage, (rooms, _, beside) in ROOMS.items():
        found = {path.parent.name for path in (ROOT / "swerl" / stage).glob("*/__init__.py")}
        assert found == set(rooms) | set(beside), f"{stage}/ rooms {sorted(found)} vs floors {rooms} + {sorted(beside)}"


def test_no_import_points_against_the_flow():
    against = _against()
    assert not against, "imports against the flow: " + "; ".join(against)


def test_no_import_circle():
    circles = _circles()
    assert not circles, "import circles: " + "; ".join(circles)


def test_the_checks_see_a_circle_and_an_arrow_against_the_flow(tmp_path):
    """The checks fail on the mistakes they exist for (a small package with them planted)."""
    package = tmp_path / "swerl"
    for sub in ("tasks", "sandbox/deployment", "inference/backends", "inference/engines", "trainer/step"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "trainer" / "__init__.py").write_text("")
    (package / "errors.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from swerl.sandbox.types import Outcome\n")
    (package / "sandbox" / "types.py").write_text("from swerl.sandbox.deployment.config import EngineConfig\n")
    (package / "sandbox" / "deployment" / "config.py").write_text("import swerl.errors\n")
    (package / "tasks" / "load.py").write_text("def f():\n    from swerl.tasks.rows import g\n")
    (package / "tasks" / "rows.py").write_text("def g():\n    from . import load\n")
    (package / "trainer" / "loop.py").write_text("from swerl import trainer\nfrom swerl.tasks import load\n")
    (package / "trainer" / "distributed.py").write_text("def f():\n    from swerl.trainer.step.update import g\n")
    (package / "trainer" / "step" / "update.py").write_text("from swerl.trainer import distributed\n")
    (package / "inference" / "engines" / "vllm_backend.py").write_text("from swerl.inference.backends import hf\n")
    (package / "inference" / "backends" / "hf.py").write_text("def f():\n    from swerl.inference import factory\n")
    (package / "inference" / "factory.py").write_text("from swerl.inference.engines import vllm_backend\n")
    assert _against(tmp_path) == [
        "swerl/errors.py:3 imports swerl.sandbox.types", "swerl/inference/backends/hf.py:2 imports swerl.inference.factory",
        "swerl/sandbox/types.py:1 imports swerl.sandbox.deployment.config",
        "swerl/trainer/distributed.py:2 imports swerl.trainer.step.update"]
    assert _circles(tmp_path) == ["swerl.errors -> swerl.sandbox.types -> swerl.sandbox.deployment.config -> swerl.errors",
                                  "swerl.inference.backends.hf -> swerl.inference.factory -> swerl.inference.engines.vllm_backend"
                                  " -> swerl.inference.backends.hf",
                                  "swerl.tasks.load -> swerl.tasks.rows -> swerl.tasks.load",
                                  "swerl.trainer.distributed -> swerl.trainer.step.update -> swerl.trainer.distributed"]


def test_the_report_runs_nothing_of_the_stages_that_make_a_run():
    """report/ reads run folders: it imports nothing of the trainer, the sandboxes or inference
    (``swerl tasks health --recheck`` runs its sandboxes in the command, not the report)."""
    upward = [(name, line, target) for name, imports in _graph().items() if name.startswith("swerl.report")
              for line, target in imports if target.split(".")[1] in ("trainer", "sandbox", "inference")]
    assert upward == []
