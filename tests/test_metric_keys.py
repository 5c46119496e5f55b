"""Every metric key that crosses a stage is spelled once, in swerl/metric_keys.py.

A key is a slash-namespaced string literal (``reward/avg_raw_reward``); docstrings, f-string
parts and attribute docstrings do not count. Two rules: a key that metric_keys.py defines is
spelled nowhere else in swerl/ (its users import the constant), and a key of one of its
namespaces that two modules spell is missing from it.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from swerl import metric_keys

ROOT = Path(__file__).resolve().parents[1] / "swerl"
KEYS_FILE = ROOT / "metric_keys.py"
KEY = re.compile(r"^[a-z_]+/[a-z0-9_@]+$")
DEFINED = {name: value for name, value in vars(metric_keys).items() if name.isupper()}


def _literals(path: Path) -> list[tuple[int, str]]:
    """(line, value) of every key-shaped string literal in one module, prose left out."""
    prose = set()
    for node in ast.walk(tree := ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            prose.add(id(node.value))  # module, class, function and attribute docstrings
        elif isinstance(node, ast.JoinedStr):
            prose.update(id(part) for part in node.values)  # pieces of an f-string build no whole key
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
            and KEY.match(node.value)]


def _spellings() -> dict[str, list[str]]:
    """key -> 'module:line' of each literal spelling it, outside metric_keys.py."""
    found = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        if path != KEYS_FILE:
            for line, value in _literals(path):
                found[value].append(f"{path.relative_to(ROOT.parent)}:{line}")
    return found


def test_each_key_is_defined_once():
    values = list(DEFINED.values())
    assert all(isinstance(v, str) for v in values)
    assert len(values) == len(set(values)), sorted(v for v in values if values.count(v) > 1)


def test_a_defined_key_is_spelled_nowhere_else():
    spellings = _spellings()
    stray = {value: spellings[value] for value in DEFINED.values() if value in spellings}
    assert not stray, f"import these from swerl.metric_keys instead: {stray}"


def test_a_key_two_modules_spell_is_defined():
    namespaces = {value.split("/")[0] for value in DEFINED.values()}
    shared = {key: where for key, where in _spellings().items()
              if key.split("/")[0] in namespaces and len({w.rsplit(":", 1)[0] for w in where}) > 1}
    assert not shared, f"add these to swerl/metric_keys.py and import them: {shared}"


def test_the_scan_finds_a_key_spelled_as_a_literal(tmp_path):
    # The rules above hold only if the scan sees literals, and no docstring or f-string piece.
    module = tmp_path / "m.py"
    module.write_text('"""reward/mean in prose."""\nX = {"reward/avg_raw_reward": 1}\nY = f"tis/lag{0}_tokens"\n')
    assert _literals(module) == [(2, "reward/avg_raw_reward")]
