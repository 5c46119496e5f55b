"""Tasks left out of a training set: ``data.exclude`` and the patch file ``swerl tasks health`` writes.

The patch file is YAML, one ``task name: reason`` line per task, e.g.

```yaml
# swerl tasks health runs/x: 2 of 12 tasks flagged. Train without them:
#   swerl train CONFIG --set data.exclude=runs/x/task_health.exclude.yaml
humaneval-002: saturated (every sample passed in its last 2 groups)
humaneval-060: never_solved (0 of 16 judged samples passed in 4 groups)
```

``data.exclude`` is either such a file (a path) or a list of task-name shell patterns.
"""

from __future__ import annotations

import fnmatch
import logging
from pathlib import Path
from typing import Sequence

import yaml

from swerl.errors import ConfigError
from swerl.fileio import atomic_write_text
from swerl.tasks.load import check_every_pattern_matches, load_tasks
from swerl.tasks.task_folder import Task

log = logging.getLogger(__name__)


def write_exclude_file(path: Path, reasons: dict[str, str], header: str) -> Path:
    """Write a patch file: ``header`` as comment lines, then ``name: reason`` per task (atomic)."""
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    body = yaml.safe_dump(dict(sorted(reasons.items())), sort_keys=False, width=1000, allow_unicode=True) if reasons else ""
    return atomic_write_text(path, comments + body)


def read_exclude_file(path: Path) -> dict[str, str]:
    """The ``name -> reason`` mapping of a patch file (an empty file excludes nothing).

    Raises: ConfigError naming the file when it is missing, not YAML or not a mapping of names.
    """
    if not path.is_file():
        raise ConfigError(f"data.exclude: {path} is not a file; pass the patch file of swerl tasks health, or a list "
                          "of task-name patterns, e.g. [humaneval-001]")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(f"data.exclude: {path} is not valid YAML ({str(err).splitlines()[0]})") from err
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ConfigError(f"data.exclude: {path} must map task names to reasons (name: reason, one per line)")
    return {name: str(reason) for name, reason in data.items()}


def excluded(names: Sequence[str], exclude: str | list[str] | None) -> dict[str, str]:
    """Which of ``names`` ``exclude`` leaves out, each with its reason.

    Args: names: task names. exclude: ``data.exclude`` (a patch file path, a list of shell
        patterns, or None).
    Returns: name -> reason (the file's reason, or ``matches PATTERN``), in the order of ``names``.
    """
    if exclude is None:
        return {}
    if isinstance(exclude, str):
        reasons = read_exclude_file(Path(exclude).expanduser())
        return {n: reasons[n] for n in names if n in reasons}
    out = {}
    for name in names:
        pattern = next((p for p in exclude if fnmatch.fnmatchcase(name, p)), None)
        if pattern is not None:
            out[name] = f"matches {pattern}"
    return out


def load_without_excluded(source: str, *, limit: int | None, names: list[str] | None,
                          exclude: str | list[str] | None) -> tuple[list[Task], dict[str, str]]:
    """The tasks of ``source`` (``names`` and ``limit`` as in :func:`load_tasks`), then without
    those ``exclude`` leaves out (after ``limit``: excluding never pulls in other tasks).

    Returns: (the tasks kept, name -> reason of each task left out).
    Raises: TaskError / ConfigError as :func:`load_tasks` and :func:`read_exclude_file`, and
        ConfigError when ``exclude`` leaves no task.
    """
    tasks = list(load_tasks(source, limit=limit, names=names, names_field="data.names"))
    if isinstance(exclude, list):  # a patch file lists the whole set's tasks: only a list is checked
        check_every_pattern_matches("data.exclude", exclude, [t.name for t in tasks], source)
    dropped = excluded([t.name for t in tasks], exclude)
    kept = [t for t in tasks if t.name not in dropped]
    if not kept:
        raise ConfigError(f"data.exclude leaves none of the {len(tasks)} tasks of {source}: exclude fewer")
    if dropped:
        log.info("data.exclude: left out %d of %d tasks: %s", len(dropped), len(tasks),
                 ", ".join(f"{name} ({why})" for name, why in dropped.items()))
    return kept, dropped
