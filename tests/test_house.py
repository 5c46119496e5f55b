"""House rules that a reader relies on: every function of the library within the 60-line budget,
every folder within 15 modules and summed up in its __init__.py, no reference to files outside
the repository, and every config key the docs name exists."""

from __future__ import annotations

import ast
import re
import subprocess
import typing
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import yaml
from pydantic import BaseModel

from swerl.trainer.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 60
MAX_FOLDER_MODULES = 15
OUTSIDE = re.compile("|".join(map(re.escape, ["../" + "shared", "shared/" + "spec", "DEVELOPERS" + ".md", "/wo" + "rk/"])))


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


def test_every_library_function_fits_the_budget():
    long = []
    for path in _tracked("swerl/*.py"):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{rel}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over the budget: " + "; ".join(long)


def test_every_library_folder_is_small_and_says_what_it_holds():
    """A folder past ~15 modules gets rooms (sub-folders named for what they hold), and every
    package's ``__init__.py`` sums it up in a docstring (``report/`` is a namespace package)."""
    modules = _tracked("swerl/*.py")
    sizes = Counter(path.parent for path in modules)
    big = [f"{folder.relative_to(ROOT)} ({count} modules)" for folder, count in sorted(sizes.items())
           if count > MAX_FOLDER_MODULES]
    assert not big, f"folders over {MAX_FOLDER_MODULES} modules (split them into rooms): " + "; ".join(big)
    inits = [folder / "__init__.py" for folder in sorted(sizes) if (folder / "__init__.py").is_file()]
    silent = [str(init.relative_to(ROOT)) for init in inits if not ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))]
    assert not silent, "folders whose __init__.py has no docstring: " + ", ".join(silent)
    assert len(sizes) > 15 and sizes[ROOT / "swerl" / "trainer" / "step"] >= 5  # the walk saw the rooms


def test_no_reference_to_files_outside_the_repository():
    hits = []
    for path in _tracked("swerl", "docs", "tests", "bench", "examples", "README.md", "Makefile", ".ci"):
        if path.suffix in (".png", ".gz", ".parquet") or path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}")
    assert not hits, "references to files outside the repository: " + ", ".join(hits)


SECTIONS = sorted(TrainConfig.model_fields)
# A dotted key in backticks or after --set whose first part is a config section (`loop.max_steps`,
# `sandbox.engines[].slots`, `--set optimizer.lr=1e-5`); file names such as `model.safetensors` are not keys.
DOC_KEY = re.compile(r"(?<![\w./-])((?:%s)(?:\.[a-z_][a-z0-9_]*|\[\d*\])+)(?![\w/(])" % "|".join(SECTIONS))
FILE_NAME = re.compile(r"\.(safetensors|json|jsonl|yaml|py|md|txt|pt|toml)$")
FOREIGN_KEYS = {"generator.step_wise_trajectories": "SkyRL's config key, named to compare"}


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions, lists, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _open_ended(annotation: object) -> bool:
    return typing.get_origin(annotation) is dict or any(_open_ended(a) for a in typing.get_args(annotation))


def _config_key_exists(key: str) -> bool:
    """``a.b[].c`` names a field of TrainConfig (any variant of a union; a dict field takes any key)."""
    models: list[type[BaseModel]] = [TrainConfig]
    parts = [p for p in re.sub(r"\[\d*\]", "", key).split(".") if p]
    for index, part in enumerate(parts):
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            return False
        if any(_open_ended(f.annotation) for f in fields):
            return True
        models = [model for f in fields for model in _models_in(f.annotation)]
        if not models and index < len(parts) - 1:
            return False
    return True


def _yaml_keys(data: dict, prefix: str = "") -> Iterator[str]:
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        yield key
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                yield from _yaml_keys(item, key)


def _doc_keys() -> Iterator[tuple[str, str]]:
    """(where, key) of every config key the docs write: in backticks, after --set, in YAML blocks."""
    for path in _tracked("docs/*.md", "README.md"):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        for number, line in enumerate(text.splitlines(), 1):
            if "unknown key" in line:  # an example of the error a wrong key gets
                continue
            for span in re.findall(r"`([^`]+)`", line) + re.findall(r"--set\s+'?([^\s']+)", line):
                for match in DOC_KEY.finditer(span):
                    if not FILE_NAME.search(match.group(1)):
                        yield f"{rel}:{number}", match.group(1)
        for block in re.findall(r"```ya?ml\n(.*?)```", text, re.S):
            data = yaml.safe_load(block)
            if isinstance(data, dict) and set(data) <= set(SECTIONS):  # a (part of a) train config
                yield from ((f"{rel} (yaml block)", key) for key in _yaml_keys(data))


def test_every_config_key_in_the_docs_exists():
    found = list(_doc_keys())
    keys = {key for _, key in found}
    assert {"loop.max_steps", "sandbox.concurrency", "sandbox.engines"} <= keys, "the docs' keys were not read"
    missing = [f"{where} {key}" for where, key in found if key not in FOREIGN_KEYS and not _config_key_exists(key)]
    assert not missing, "config keys in the docs that no config model has: " + "; ".join(missing)


def test_the_key_check_refuses_a_key_no_model_has():
    assert _config_key_exists("sandbox.engines[].tls.ca_cert") and _config_key_exists("optimizer.lr")
    assert not _config_key_exists("sandbox.docker_base") and not _config_key_exists("optimizer.lr.x")
