"""House rules that a reader relies on: every function of the library within the 60-line budget
(the CLI module aside, being split), and no reference to files outside the repository."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 60
EXEMPT = ("swerl/cli.py", "swerl/cli/")  # the CLI's commands are being split into a package
OUTSIDE = re.compile("|".join(map(re.escape, ["../" + "shared", "shared/" + "spec", "DEVELOPERS" + ".md", "/wo" + "rk/"])))


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


def test_every_library_function_fits_the_budget():
    long = []
    for path in _tracked("swerl/*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(EXEMPT):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{rel}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over the budget: " + "; ".join(long)


def test_no_reference_to_files_outside_the_repository():
    hits = []
    for path in _tracked("swerl", "docs", "tests", "bench", "examples", "README.md", "Makefile", ".ci"):
        if path.suffix in (".png", ".gz", ".parquet") or path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}")
    assert not hits, "references to files outside the repository: " + ", ".join(hits)
