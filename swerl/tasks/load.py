"""Load Harbor task folders into validated :class:`Task` objects.

``load_task`` checks one folder against ``docs/tasks.md`` and raises
:class:`MalformedTask` (a ``TaskError``, exit 2) naming the file and the reason.
``load_tasks`` reads a whole source: a folder of task folders, one task folder, or a
Parquet/JSONL dataset of ``path`` + ``task_binary`` rows; with ``on_error="skip"`` a
malformed task is logged, listed in ``TaskSet.problems`` and left out, never crashing
the batch.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from swerl.errors import TaskError
from swerl.tasks.schema_notes import unsupported_keys
from swerl.tasks.task_folder import MalformedTask, Task, TaskConfig, TaskProblem, TaskSet
from swerl.tasks.task_toml import NEWEST_SCHEMA

log = logging.getLogger(__name__)

COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
ROW_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "swerl" / "tasks"

_warned_keys: set[str] = set()
_warned_lock = threading.Lock()


def _format_validation_error(err: ValidationError) -> str:
    """One line naming each bad task.toml field, pydantic's reason and the value given (a table's
    or a list's value is left out when the reason already names the fix)."""
    parts = []
    for e in err.errors():
        field = ".".join(str(x) for x in e["loc"]) or "(top level)"
        value = e.get("input")
        message = e["msg"].removeprefix("Value error, ")  # swerl's own reasons name the fix already
        given = "" if e["type"] == "value_error" and isinstance(value, (dict, list)) else f" (got {value!r})"
        parts.append(f"field {field!r}: {message}{given}")
    return "; ".join(parts)


def _warn_once(key: str, message: str, *args: object) -> None:
    """Log ``message`` the first time ``key`` is seen in this process."""
    with _warned_lock:
        if key in _warned_keys:
            return
        _warned_keys.add(key)
    log.warning(message, *args)


def _warn_unsupported(config: TaskConfig, toml_path: Path) -> None:
    """Warn once per process per newer schema and per key swerl does not act on (first file named)."""
    if config.schema_is_newer():
        _warn_once(f"schema {config.schema_version}",
                   "task.toml schema %s is newer than %s, the newest swerl reads: keys swerl does not know are "
                   "ignored (`swerl tasks validate` lists them), declared artifacts still get the clean room "
                   "(first seen in %s)", config.schema_version, NEWEST_SCHEMA, toml_path)
    for note in unsupported_keys(config):
        _warn_once(note.key, "task.toml key %r: %s (first seen in %s)", note.key, note.instead, toml_path)


def _read_config(toml_path: Path) -> TaskConfig:
    if not toml_path.is_file():
        raise MalformedTask(toml_path, "missing task.toml (limits and metadata; may be empty for defaults)")
    try:
        raw = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise MalformedTask(toml_path, f"not UTF-8 text: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise MalformedTask(toml_path, f"bad TOML: {err}") from err
    try:
        config = TaskConfig.model_validate(raw)
    except ValidationError as err:
        raise MalformedTask(toml_path, _format_validation_error(err)) from err
    _warn_unsupported(config, toml_path)
    return config


def _read_instruction(path: Path) -> str:
    if not path.is_file():
        raise MalformedTask(path, "missing instruction.md (the prompt shown to the agent)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise MalformedTask(path, f"not UTF-8 text: {err}") from err
    if not text.strip():
        raise MalformedTask(path, "instruction.md is empty")
    return text


def _check_environment(root: Path, config: TaskConfig) -> None:
    env_dir = root / "environment"
    for folder in (env_dir, root / "tests"):
        for name in COMPOSE_FILES:
            if (folder / name).exists():
                raise MalformedTask(folder / name, "docker compose environments are not supported yet; "
                                    f"use a single {folder.name}/Dockerfile")
    if config.environment.docker_image:
        return
    if not (env_dir / "Dockerfile").is_file():
        raise MalformedTask(env_dir / "Dockerfile",
                            "missing environment/Dockerfile (or set [environment] docker_image in task.toml)")


def _check_tests(task: Task) -> None:
    """tests/test.sh must exist unless the tests belong to a separate verifier's own image."""
    if not task.tests_in_verifier_image and not task.test_script.is_file():
        raise MalformedTask(task.test_script, "missing tests/test.sh (the verifier entry point)")


def _check_links(root: Path) -> None:
    """Reject symlinks that point outside the task folder (they would leak host files into the sandbox)."""
    for path in root.rglob("*"):
        if path.is_symlink():
            target = path.resolve()
            if target != root and root not in target.parents:
                raise MalformedTask(path, f"symlink points outside the task folder (-> {target})")


def load_task(path: Path | str, *, name: str | None = None) -> Task:
    """Load and validate one Harbor task folder.

    Args:
        path: the task folder (holding instruction.md, task.toml, environment/, tests/).
        name: task name; defaults to the folder's name.
    Returns:
        The validated :class:`Task` (``path`` absolute).
    Raises:
        MalformedTask: naming the file and the reason: missing instruction.md or task.toml,
            bad TOML (with line and column), wrong field types (field named), a compose
            environment (not supported yet), missing environment/Dockerfile or tests/test.sh
            (not needed when a separate verifier's own image holds the tests), ``[[steps]]``
            (multi-step tasks are refused), a symlink escaping the folder.
    """
    root = Path(path).resolve()
    if not root.is_dir():
        raise MalformedTask(root, "not a task folder (no such directory)")
    instruction = _read_instruction(root / "instruction.md")
    config = _read_config(root / "task.toml")
    _check_environment(root, config)
    task = Task(name=name or root.name, path=root, instruction=instruction, config=config)
    _check_tests(task)
    _check_links(root)
    return task


def _is_task_folder(path: Path) -> bool:
    return (path / "task.toml").is_file() or (path / "instruction.md").is_file()


Candidate = tuple[str, Callable[[], Task]]


def _folder_candidates(root: Path) -> Iterator[Candidate]:
    """One candidate per sub-folder of ``root``, sorted by name (hidden folders skipped)."""
    for child in sorted(root.iterdir(), key=lambda p: p.name):
        if child.is_dir() and not child.name.startswith((".", "__")):
            yield str(child), (lambda c=child: load_task(c))


def _task_sets_inside(root: Path) -> list[str]:
    """The sub-folders of ``root`` that are folders of task folders, when no sub-folder is a task
    itself (a generated family's train/, heldout-instance/, ...); else []."""
    children = [c for c in sorted(root.iterdir()) if c.is_dir() and not c.name.startswith((".", "__"))]
    if any(_is_task_folder(c) for c in children):
        return []
    return [c.name for c in children if any(_is_task_folder(g) for g in c.iterdir() if g.is_dir())]


def _candidates(source: Path, cache_dir: Path) -> Iterator[Candidate]:
    if source.is_dir():
        if _is_task_folder(source):
            yield str(source), (lambda: load_task(source))
            return
        sets = _task_sets_inside(source)
        if sets:
            raise TaskError(f"{source}: holds task sets, not tasks ({', '.join(sets)}): pass one of them, "
                            f"e.g. {source / sets[0]}")
        yield from _folder_candidates(source)
    elif source.name.endswith(ROW_SUFFIXES):
        from swerl.tasks.rows import row_candidates

        yield from row_candidates(source, cache_dir, load_task)
    else:
        raise TaskError(f"{source}: not a task folder, a folder of tasks, or a .parquet/.jsonl dataset")


def check_every_pattern_matches(field: str, patterns: Sequence[str], names: Sequence[str], where: Path | str) -> None:
    """Every shell pattern of ``patterns`` (``data.names``, ``data.exclude``, ``eval.names``) matches
    at least one of ``names`` (the tasks of ``where``).

    Raises:
        TaskError: (exit 2) naming each pattern that matches no task and, for each, the closest
            task names (``difflib``), or the first few names when none is close.
    """
    import difflib

    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if not unmatched:
        return
    hints = []
    for pattern in unmatched:
        close = difflib.get_close_matches(pattern, names, n=3, cutoff=0.6)
        hints.append(f"{pattern!r} (closest: {', '.join(close)})" if close else repr(pattern))
    sample = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
    raise TaskError(f"{field}: {'; '.join(hints)} match{'es' if len(unmatched) == 1 else ''} none of the "
                    f"{len(names)} tasks of {where} (e.g. {sample}); fix or remove "
                    f"{'it' if len(unmatched) == 1 else 'them'}")


def _check_found(src: Path, tasks: list[Task], problems: list[TaskProblem], names: Sequence[str] | None,
                 names_field: str | None, seen: list[str]) -> None:
    """The TaskErrors of :func:`load_tasks` once its source is read (``seen``: every valid name)."""
    if names is not None and names_field is not None and seen:
        check_every_pattern_matches(names_field, names, seen, src)
    if not tasks and names is not None and seen:
        raise TaskError(f"{src}: no task name matches {list(names)}; check the names (e.g. humaneval-000)")
    if not tasks and not problems:
        raise TaskError(f"{src}: holds no task folders (a task has instruction.md, task.toml, environment/, tests/)")


def load_tasks(
    source: Path | str,
    *,
    limit: int | None = None,
    names: Sequence[str] | None = None,
    on_error: Literal["raise", "skip"] = "raise",
    cache_dir: Path | None = None,
    names_field: str | None = None,
) -> TaskSet:
    """Load every task of a source, in order.

    Args:
        source: a folder of task folders (sorted by name), a single task folder, or a
            ``.parquet`` / ``.jsonl`` (``.jsonl.gz``) file of ``path`` + ``task_binary`` rows.
        limit: stop after this many valid tasks (None: all); counted after ``names``.
        names: keep only tasks whose name matches one of these shell patterns
            (``fnmatch``, e.g. ``humaneval-00*``); None keeps all.
        on_error: ``"raise"`` re-raises the first MalformedTask; ``"skip"`` logs it, records
            ``(path, reason)`` in ``TaskSet.problems`` and goes on.
        cache_dir: where dataset rows are extracted (default ``~/.cache/swerl/tasks``),
            one folder per archive SHA-256.
        names_field: the config field or flag ``names`` came from (``data.names``): every pattern
            of ``names`` must then match a task of the source (a typo is an error, not a task
            dropped in silence); None: patterns that match nothing are ignored.
    Returns:
        A :class:`TaskSet` of the valid tasks and the problems found.
    Raises:
        TaskError: the source does not exist, has an unknown format, lacks the dataset
            columns, or holds no task at all (even with ``on_error="skip"``), or no task
            matches ``names`` (with ``names_field``: a pattern of ``names`` matches none).
        MalformedTask: with ``on_error="raise"``, the first malformed task.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    src = Path(source).expanduser().resolve()
    if not src.exists():
        raise TaskError(f"{src}: no such file or folder; pass a task folder or a .parquet/.jsonl dataset")
    tasks: list[Task] = []
    problems: list[TaskProblem] = []
    seen: dict[str, str] = {}
    for label, load in _candidates(src, cache_dir or DEFAULT_CACHE_DIR):
        if limit is not None and len(tasks) >= limit:
            break
        try:
            task = load()
            if task.name in seen:
                raise MalformedTask(label, f"duplicate task name {task.name!r} (first in {seen[task.name]})")
        except MalformedTask as err:
            if on_error == "raise":
                raise
            log.warning("skipping malformed task: %s", err)
            problems.append(TaskProblem(err.file, err.reason))
            continue
        seen[task.name] = label
        if names is not None and not any(fnmatch.fnmatchcase(task.name, p) for p in names):
            continue
        tasks.append(task)
    cut = limit is not None and len(tasks) >= limit  # later names unknown: no pattern check
    _check_found(src, tasks, problems, names, None if cut else names_field, list(seen))
    return TaskSet(source=src, tasks=tuple(tasks), problems=tuple(problems))
