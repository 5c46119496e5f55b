"""Task archives: pack a task folder into a gzip'd tar and extract one safely.

This is the ``task_binary`` column of the Parquet/JSONL task datasets (how
``DCAgent/exp_rpt_pymethods2test-large`` is published; see ``docs/tasks.md``):
members are paths relative to the task folder. Extraction accepts that layout or a
single top-level folder, refuses anything that could write outside the target
(``..``, absolute names, links escaping the folder, devices, FIFOs), and lands in a
cache folder keyed by the archive's SHA-256, written to a temp path and renamed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import posixpath
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path

from swerl.tasks.task_folder import MalformedTask

MAX_ARCHIVE_BYTES = 256 * 1024 * 1024
"""Largest total size of the files in one task archive, bytes (a guard against tar bombs)."""

MAX_ARCHIVE_MEMBERS = 10_000
"""Most members one task archive may hold."""


def pack_task(task_dir: Path) -> bytes:
    """Gzip'd tar of ``task_dir`` with members relative to it; deterministic bytes.

    Files are added in sorted order with mtime 0 and root ownership, so the same
    folder always gives the same bytes (and the same cache key on extraction).
    Symlinks are stored as links. Raises OSError if the folder cannot be read.
    """
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        add_tree(tar, task_dir, "", mtime=0)
    return buf.getvalue()


def add_tree(tar: tarfile.TarFile, folder: Path, arc_prefix: str, mtime: int | None = None) -> None:
    """Add everything under ``folder`` to ``tar`` as ``<arc_prefix><relative path>``, sorted, owned
    by root (uid/gid 0); ``mtime`` (seconds) replaces the files' times when given (reproducible
    archives)."""
    for path in sorted(folder.rglob("*")):
        info = tar.gettarinfo(str(path), arcname=arc_prefix + path.relative_to(folder).as_posix())
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if mtime is not None:
            info.mtime = mtime
        if info.isreg():
            with path.open("rb") as fh:
                tar.addfile(info, fh)
        else:
            tar.addfile(info)


def archive_digest(data: bytes) -> str:
    """Hex SHA-256 of an archive's bytes (its cache key)."""
    return hashlib.sha256(data).hexdigest()


def _escapes(member_name: str, target: str) -> bool:
    """True when ``target`` (relative to the member's folder) resolves outside the archive root."""
    if posixpath.isabs(target):
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(member_name), target))
    return resolved == ".." or resolved.startswith("../")


def _check_member(member: tarfile.TarInfo, label: str) -> None:
    """Raise MalformedTask for a member that could write outside the extraction folder."""
    name = member.name
    if name.startswith("/") or posixpath.isabs(name):
        raise MalformedTask(label, f"archive member {name!r} has an absolute path")
    if ".." in name.split("/"):
        raise MalformedTask(label, f"archive member {name!r} contains '..'")
    if member.issym():
        if _escapes(name, member.linkname):
            raise MalformedTask(label, f"symlink {name!r} -> {member.linkname!r} escapes the task folder")
    elif member.islnk():
        link = member.linkname
        if posixpath.isabs(link) or ".." in link.split("/"):
            raise MalformedTask(label, f"hardlink {name!r} -> {link!r} escapes the task folder")
    elif member.isdev():
        raise MalformedTask(label, f"archive member {name!r} is a device or FIFO")
    elif not (member.isfile() or member.isdir()):
        raise MalformedTask(label, f"archive member {name!r} has unsupported type {member.type!r}")


def _extract_checked(data: bytes, dest: Path, label: str) -> None:
    """Check every member, then extract into ``dest`` with tarfile's ``data`` filter as a second guard."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            members = tar.getmembers()
            if len(members) > MAX_ARCHIVE_MEMBERS:
                raise MalformedTask(label, f"archive holds {len(members)} members (limit {MAX_ARCHIVE_MEMBERS})")
            total = 0
            for member in members:
                _check_member(member, label)
                total += max(member.size, 0)
            if total > MAX_ARCHIVE_BYTES:
                raise MalformedTask(label, f"archive unpacks to {total} bytes (limit {MAX_ARCHIVE_BYTES})")
            tar.extractall(dest, members=members, filter="data")
    except MalformedTask:
        raise
    except tarfile.FilterError as err:
        raise MalformedTask(label, f"unsafe archive member: {err}") from err
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise MalformedTask(label, f"task_binary is not a readable (gzip'd) tar: {err}") from err


def _task_root(extracted: Path) -> Path:
    """The task folder inside an extraction: the folder itself or its single top-level child."""
    if (extracted / "instruction.md").exists() or (extracted / "task.toml").exists():
        return extracted
    children = [c for c in extracted.iterdir()]
    if len(children) == 1 and children[0].is_dir() and not children[0].is_symlink():
        return children[0]
    return extracted


def extract_task_archive(data: bytes, name: str, cache_dir: Path, *, label: str | None = None) -> Path:
    """Extract one task archive to ``cache_dir/<sha256[:32]>/<name>`` and return that folder.

    Args:
        data: gzip'd (or plain) tar bytes of one task folder.
        name: task name, a single safe path component (e.g. ``pymethods2test-0007``).
        cache_dir: root of the extraction cache; created if missing.
        label: where the archive came from, for error messages (default: ``name``).
    Returns:
        The extracted task folder; an existing one is reused (same bytes, same folder).
    Raises:
        MalformedTask: unreadable archive, unsafe member, or a bad ``name``.
    """
    label = label or name
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise MalformedTask(label, f"task name {name!r} is not a single folder name")
    dest = cache_dir / archive_digest(data)[:32] / name
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest.parent))
    try:
        _extract_checked(data, tmp, label)
        try:
            os.rename(_task_root(tmp), dest)
        except OSError:
            if not dest.is_dir():  # lost a race to another process: its copy is identical
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
