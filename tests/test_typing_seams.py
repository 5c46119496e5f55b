"""The seams between stages are typed: few annotations in swerl/ are a bare ``Any``.

A bare ``Any`` (a parameter, a return or an annotated assignment whose whole annotation is
``Any``) says nothing of what crosses a seam; a task is a ``Task``, a sandbox a ``Sandbox``, a
backend a ``GenerationBackend`` or ``ContinuousBackend``, a value nobody looks into an ``object``.
``dict[str, Any]`` for JSON records is fine: only the bare name counts. What stays (a module's or a
proxy's ``__getattr__``, the pydantic ``Field`` factories) is dynamic on purpose.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_BARE_ANY = 40


def _annotations(tree: ast.AST) -> list[ast.expr]:
    """Every parameter, return and annotated-assignment annotation in ``tree``."""
    found: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            found += [arg.annotation for arg in every if arg is not None]
            found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return [annotation for annotation in found if annotation is not None]


def bare_any(root: Path = ROOT) -> Counter[str]:
    """Bare ``Any`` annotations per file of ``root/swerl`` (paths relative to ``root``)."""
    counts: Counter[str] = Counter()
    for path in sorted((root / "swerl").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hits = sum(ast.unparse(annotation) == "Any" for annotation in _annotations(tree))
        if hits:
            counts[path.relative_to(root).as_posix()] = hits
    return counts


def test_few_annotations_are_a_bare_any():
    counts = bare_any()
    total = sum(counts.values())
    top = "; ".join(f"{path} ({n})" for path, n in counts.most_common(10))
    assert total < MAX_BARE_ANY, (
        f"{total} bare Any annotations in swerl/ (at most {MAX_BARE_ANY - 1}); type the seams "
        f"(Task, Sandbox, GenerationBackend, object when opaque): {top}")


def test_the_count_sees_each_kind_of_annotation_and_only_a_bare_any(tmp_path):
    """Parameters (``*args``, ``**kwargs``, keyword-only), returns and annotated assignments count;
    ``dict[str, Any]``, ``Any | None`` and unannotated names do not."""
    package = tmp_path / "swerl" / "agent"
    package.mkdir(parents=True)
    (package / "episode.py").write_text(
        "from typing import Any\n"
        "def run(task: Any, *args: Any, sandbox: Any = None, **kwargs: Any) -> Any:\n"
        "    state: Any = None\n"
        "    record: dict[str, Any] = {}\n"
        "    return state\n"
        "async def verify(sandbox, result: Any | None) -> dict[str, Any]:\n"
        "    return {}\n"
        "class Held:\n"
        "    backend: Any\n")
    (tmp_path / "swerl" / "fileio.py").write_text("def write(payload: object) -> None: ...\n")
    assert bare_any(tmp_path) == Counter({"swerl/agent/episode.py": 7})
