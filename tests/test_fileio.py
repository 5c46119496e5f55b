"""Atomic writes: the whole new file or the old one, readable modes, no temp file left behind."""

from __future__ import annotations

import json
import os
import stat

import pytest

from swerl.fileio import (
    TooManyEntries,
    atomic_dir,
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    replace_dir,
    walk_tree,
)


def test_writes_create_parents_and_are_readable_under_a_private_umask(tmp_path):
    old = os.umask(0o077)
    try:
        path = atomic_write_text(tmp_path / "a" / "b.txt", "hello")
    finally:
        os.umask(old)
    assert path.read_text() == "hello" and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert atomic_write_bytes(tmp_path / "c.bin", b"\x00\x01").read_bytes() == b"\x00\x01"
    assert json.loads(atomic_write_json(tmp_path / "d.json", {"step": 3}).read_text()) == {"step": 3}


def test_a_failing_writer_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = atomic_write_text(tmp_path / "keep.txt", "old")

    def half_then_fail(tmp):  # noqa: ANN001
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_a_folder_appears_whole_and_replaces_the_old_one(tmp_path):
    target = tmp_path / "models" / "m"
    atomic_dir(target, lambda tmp: (tmp / "config.json").write_text("1"))
    atomic_dir(target, lambda tmp: (tmp / "weights.bin").write_bytes(b"2"))
    assert sorted(p.name for p in target.iterdir()) == ["weights.bin"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["m"]  # no temp, no old copy left


def test_a_failing_folder_writer_keeps_the_old_folder(tmp_path):
    target = atomic_dir(tmp_path / "m", lambda tmp: (tmp / "a").write_text("old"))

    def half_then_fail(tmp):  # noqa: ANN001
        (tmp / "a").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_dir(target, half_then_fail)
    assert (target / "a").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_replace_dir_publishes_a_prepared_folder(tmp_path):
    tmp = tmp_path / ".tmp-step"
    tmp.mkdir()
    (tmp / "state").write_text("new")
    final = replace_dir(tmp, tmp_path / "step")
    assert (final / "state").read_text() == "new" and not tmp.exists()


def test_a_walk_reads_every_entry_up_to_its_limit_and_stops_past_it(tmp_path):
    for i in range(5):
        (tmp_path / "d" / str(i)).mkdir(parents=True)
        (tmp_path / "d" / str(i) / "f").touch()
    assert len(list(walk_tree(str(tmp_path), limit=11))) == 11  # d, its 5 folders, their 5 files
    with pytest.raises(TooManyEntries):
        list(walk_tree(str(tmp_path), limit=10))
