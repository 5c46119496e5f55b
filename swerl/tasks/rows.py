"""Task datasets as rows: Parquet or JSONL with a ``path`` and a ``task_binary`` column.

``task_binary`` is a gzip'd tar of one task folder (raw bytes in Parquet, base64 text
in JSONL); ``path`` is the task folder's relative path, whose last component is the
task name (e.g. ``pymethods2test-0007``). This is how ``DCAgent/exp_rpt_pymethods2test-large``
and the TaskTrove collections are published (``docs/tasks.md``).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from swerl.fileio import atomic_write, atomic_write_text
from swerl.errors import TaskError
from swerl.tasks.archive import extract_task_archive, pack_task
from swerl.tasks.task_folder import MalformedTask, Task

FolderLoader = Callable[..., Task]  # load_task(folder, *, name): validates one extracted task folder

COLUMNS = ("path", "task_binary")


def _parquet_rows(file: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(file)
    except Exception as err:  # pyarrow raises ArrowInvalid/OSError subclasses for corrupt files
        raise TaskError(f"{file}: not a readable Parquet file: {err}") from err
    missing = [c for c in COLUMNS if c not in pf.schema_arrow.names]
    if missing:
        raise TaskError(f"{file}: missing column(s) {missing}; a task dataset needs 'path' and 'task_binary'")
    for batch in pf.iter_batches(batch_size=64, columns=list(COLUMNS)):
        yield from batch.to_pylist()


def _jsonl_rows(file: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if file.name.endswith(".gz") else open
    with opener(file, "rt", encoding="utf-8", errors="replace") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                row = {"_error": f"line {line_no}: bad JSON: {err}"}
            yield row if isinstance(row, dict) else {"_error": f"line {line_no}: not a JSON object"}


def _task_bytes(value: object) -> bytes:
    """Raw archive bytes from a Parquet binary or a JSONL base64 string."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as err:
            raise ValueError(f"task_binary is not valid base64: {err}") from err
    raise ValueError(f"task_binary must be bytes or base64 text, got {type(value).__name__}")


def _load_row(row: dict[str, Any], label: str, cache_dir: Path, load_task: FolderLoader) -> Task:
    if "_error" in row:
        raise MalformedTask(label, row["_error"])
    rel = row.get("path")
    if not isinstance(rel, str) or not rel.strip():
        raise MalformedTask(label, "row has no 'path' (the task's folder name)")
    name = PurePosixPath(rel.strip().rstrip("/")).name
    if row.get("task_binary") is None:
        raise MalformedTask(label, "row has no 'task_binary'")
    try:
        data = _task_bytes(row["task_binary"])
    except ValueError as err:
        raise MalformedTask(label, str(err)) from err
    folder = extract_task_archive(data, name, cache_dir, label=label)
    try:
        return load_task(folder, name=name)
    except MalformedTask as err:  # name the dataset row, not only the cache path
        raise MalformedTask(f"{label} ({err.file})", err.reason) from err


def row_candidates(
    file: Path, cache_dir: Path, load_task: FolderLoader
) -> Iterator[tuple[str, Callable[[], Task]]]:
    """One ``(label, loader)`` per dataset row; the loader extracts the task and validates it with
    ``load_task(folder, name=...)`` (``swerl.tasks.load.load_task``, passed in: load.py calls this
    module, never the reverse).

    Raises:
        TaskError: the file is unreadable or lacks the ``path``/``task_binary`` columns.
    """
    rows = _parquet_rows(file) if file.suffix == ".parquet" else _jsonl_rows(file)
    for index, row in enumerate(rows):
        rel = row.get("path")
        label = f"{file}#{index}" + (f" ({rel})" if isinstance(rel, str) else "")
        yield label, (lambda r=row, lb=label: _load_row(r, lb, cache_dir, load_task))


def write_tasks_parquet(tasks: Iterable[Task], out: Path | str) -> Path:
    """Write tasks as a Parquet dataset (``path`` string, ``task_binary`` binary), atomically.

    The archives are deterministic (see :func:`pack_task`), so a round trip through
    :func:`swerl.tasks.load.load_tasks` gives the same tasks. Returns ``out``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    tasks = list(tasks)
    table = pa.table({
        "path": pa.array([t.name for t in tasks], type=pa.string()),
        "task_binary": pa.array([pack_task(t.path) for t in tasks], type=pa.binary()),
    })
    return atomic_write(Path(out), lambda tmp: pq.write_table(table, tmp))


def write_tasks_jsonl(tasks: Iterable[Task], out: Path | str) -> Path:
    """Write tasks as JSONL rows ``{"path": name, "task_binary": base64}``, atomically. Returns ``out``."""
    lines = [json.dumps({"path": t.name, "task_binary": base64.b64encode(pack_task(t.path)).decode()})
             for t in tasks]
    return atomic_write_text(Path(out), "".join(line + "\n" for line in lines))
