"""swerl.tasks.archive: deterministic packing and safe, cached extraction of task archives."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from swerl.tasks.archive import archive_digest, extract_task_archive, pack_task
from swerl.tasks.task_folder import MalformedTask

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


def _tar(*members: tuple[tarfile.TarInfo, bytes | None], prefix: str = "") -> bytes:
    """Gzip'd tar of the given members (payload None for non-files)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, payload in members:
            info.name = prefix + info.name
            if payload is not None:
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                tar.addfile(info)
    return buf.getvalue()


def _file(name: str, text: str = "x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), text.encode()


def _link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def test_pack_is_deterministic_and_round_trips(tmp_path: Path):
    data = pack_task(FIXTURES / "add-two")
    assert data == pack_task(FIXTURES / "add-two")
    out = extract_task_archive(data, "add-two", tmp_path)
    assert out == tmp_path / archive_digest(data)[:32] / "add-two"
    for rel in ("instruction.md", "task.toml", "tests/test.sh", "solution/solve.sh"):
        assert (out / rel).read_bytes() == (FIXTURES / "add-two" / rel).read_bytes()
    assert (out / "tests" / "test.sh").stat().st_mode & 0o100  # executable bit kept


def test_extraction_is_cached_by_content(tmp_path: Path):
    data = pack_task(FIXTURES / "add-two")
    first = extract_task_archive(data, "add-two", tmp_path)
    (first / "marker").write_text("still here")
    assert extract_task_archive(data, "add-two", tmp_path) == first
    assert (first / "marker").exists()
    assert [p.name for p in first.parent.iterdir()] == ["add-two"]  # no temp folders left


def test_single_top_level_folder_layout_is_accepted(tmp_path: Path):
    data = _tar(_file("instruction.md", "do it"), _file("task.toml", ""), prefix="my-task/")
    out = extract_task_archive(data, "my-task", tmp_path)
    assert (out / "instruction.md").read_text() == "do it"


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (_file("../evil.txt"), "contains '..'"),
        (_file("tests/../../evil.txt"), "contains '..'"),
        (_file("/tmp/evil.txt"), "absolute path"),
        (_link("tests/link", "/etc/passwd", tarfile.SYMTYPE), "symlink .* escapes"),
        (_link("tests/link", "../../outside", tarfile.SYMTYPE), "symlink .* escapes"),
        (_link("tests/hard", "../outside", tarfile.LNKTYPE), "hardlink .* escapes"),
        (_link("tests/hard", "/etc/passwd", tarfile.LNKTYPE), "hardlink .* escapes"),
    ],
)
def test_escaping_members_are_rejected_and_nothing_is_written(tmp_path: Path, member, reason):
    cache = tmp_path / "cache"
    data = _tar(_file("instruction.md"), member)
    with pytest.raises(MalformedTask, match=reason):
        extract_task_archive(data, "bad", cache, label="rows.parquet#3")
    assert not (tmp_path / "evil.txt").exists()
    assert not list(cache.rglob("instruction.md"))


def test_device_member_is_rejected(tmp_path: Path):
    info = tarfile.TarInfo("tests/null")
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    with pytest.raises(MalformedTask, match="device or FIFO"):
        extract_task_archive(_tar(_file("instruction.md"), (info, None)), "bad", tmp_path)


def test_internal_links_are_kept(tmp_path: Path):
    data = _tar(_file("instruction.md", "hi"), _link("tests/alias.md", "../instruction.md", tarfile.SYMTYPE),
                _link("tests/hard.md", "instruction.md", tarfile.LNKTYPE))
    out = extract_task_archive(data, "links", tmp_path)
    assert (out / "tests" / "alias.md").read_text() == "hi"
    assert (out / "tests" / "hard.md").read_text() == "hi"


def test_garbage_bytes_are_a_malformed_task(tmp_path: Path):
    with pytest.raises(MalformedTask, match="not a readable"):
        extract_task_archive(gzip.compress(b"not a tar at all" * 40), "junk", tmp_path)
    with pytest.raises(MalformedTask, match="not a readable"):
        extract_task_archive(pack_task(FIXTURES / "add-two")[:100], "truncated", tmp_path)


@pytest.mark.parametrize("name", ["", "..", "a/b", "."])
def test_bad_task_names_are_rejected(tmp_path: Path, name: str):
    with pytest.raises(MalformedTask, match="not a single folder name"):
        extract_task_archive(pack_task(FIXTURES / "add-two"), name, tmp_path)
