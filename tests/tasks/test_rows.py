"""swerl.tasks.rows: Parquet/JSONL task datasets (path + gzip'd tar task_binary)."""

from __future__ import annotations

import base64
import gzip
import io
import json
import shutil
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swerl.errors import TaskError
from swerl.tasks import MalformedTask, load_tasks, write_tasks_jsonl, write_tasks_parquet
from swerl.tasks.archive import pack_task

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


def _evil_archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../../escape.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    return buf.getvalue()


def _same_tasks(a, b) -> bool:
    return [(t.name, t.instruction, t.config) for t in a] == [(t.name, t.instruction, t.config) for t in b]


def test_parquet_round_trip(tmp_path: Path):
    original = load_tasks(FIXTURES)
    out = write_tasks_parquet(original, tmp_path / "tasks.parquet")
    table = pq.read_table(out)
    assert table.column_names == ["path", "task_binary"]
    assert table.schema.field("task_binary").type == pa.binary()
    loaded = load_tasks(out, cache_dir=tmp_path / "cache")
    assert _same_tasks(loaded, original)
    assert all(t.path.is_relative_to(tmp_path / "cache") for t in loaded)
    assert (loaded[0].path / "solution" / "solve.sh").is_file()


def test_jsonl_round_trip_with_base64_binaries(tmp_path: Path):
    original = load_tasks(FIXTURES)
    out = write_tasks_jsonl(original, tmp_path / "tasks.jsonl")
    first = json.loads(out.read_text().splitlines()[0])
    assert first["path"] == "add-two"
    assert base64.b64decode(first["task_binary"])[:2] == b"\x1f\x8b"  # gzip magic
    assert _same_tasks(load_tasks(out, cache_dir=tmp_path / "cache"), original)


def test_gzipped_jsonl_and_nested_row_paths(tmp_path: Path):
    row = {"path": "tasks/pymethods2test-0001",
           "task_binary": base64.b64encode(pack_task(FIXTURES / "count-vowels")).decode()}
    out = tmp_path / "tasks.jsonl.gz"
    out.write_bytes(gzip.compress((json.dumps(row) + "\n").encode()))
    tasks = load_tasks(out, cache_dir=tmp_path / "cache")
    assert tasks.names == ["pymethods2test-0001"]
    assert tasks[0].path.name == "pymethods2test-0001"


def test_malformed_rows_are_skipped_with_their_row_named(tmp_path: Path):
    good = pack_task(FIXTURES / "add-two")
    no_instruction = tmp_path / "no-instr"
    shutil.copytree(FIXTURES / "reverse-words", no_instruction)
    (no_instruction / "instruction.md").unlink()
    table = pa.table({
        "path": ["good-1", "evil", "garbage", "no-instruction", None, "good-2"],
        "task_binary": [good, _evil_archive(), b"garbage", pack_task(no_instruction), good, good],
    })
    src = tmp_path / "rows.parquet"
    pq.write_table(table, src)
    tasks = load_tasks(src, on_error="skip", cache_dir=tmp_path / "cache")
    assert tasks.names == ["good-1", "good-2"]
    reasons = {p.path.split("#")[1].split(" ")[0]: p.reason for p in tasks.problems}
    assert "contains '..'" in reasons["1"]
    assert "not a readable" in reasons["2"]
    assert "missing instruction.md" in reasons["3"]
    assert "no 'path'" in reasons["4"]
    assert not (tmp_path / "escape.txt").exists()
    with pytest.raises(MalformedTask, match=r"rows.parquet#1 \(evil\)"):
        load_tasks(src, cache_dir=tmp_path / "cache")


def test_duplicate_names_are_problems(tmp_path: Path):
    data = pack_task(FIXTURES / "add-two")
    pq.write_table(pa.table({"path": ["x", "x"], "task_binary": [data, data]}), tmp_path / "d.parquet")
    tasks = load_tasks(tmp_path / "d.parquet", on_error="skip", cache_dir=tmp_path / "cache")
    assert tasks.names == ["x"]
    assert "duplicate task name" in tasks.problems[0].reason


def test_bad_jsonl_lines_are_problems(tmp_path: Path):
    src = tmp_path / "t.jsonl"
    src.write_text('{"path": "a", "task_binary": "!!notbase64!!"}\n{not json\n[1, 2]\n')
    with pytest.raises(TaskError, match="not valid base64"):
        load_tasks(src, cache_dir=tmp_path / "cache")
    # with skip every row is a problem; the set is empty but not an error
    tasks_problems = load_tasks(src, on_error="skip", cache_dir=tmp_path / "cache").problems
    assert [r.reason.split(":")[0] for r in tasks_problems] == [
        "task_binary is not valid base64", "line 2", "line 3"]


def test_parquet_without_the_columns_is_a_task_error(tmp_path: Path):
    pq.write_table(pa.table({"name": ["a"], "blob": [b"x"]}), tmp_path / "wrong.parquet")
    with pytest.raises(TaskError, match="missing column"):
        load_tasks(tmp_path / "wrong.parquet", on_error="skip")


def test_limit_applies_to_rows(tmp_path: Path):
    out = write_tasks_parquet(load_tasks(FIXTURES), tmp_path / "t.parquet")
    assert load_tasks(out, limit=1, cache_dir=tmp_path / "cache").names == ["add-two"]
