"""Atomic writes: a file or a folder is written under a temp name beside its target and renamed
over it, so a crash or a kill leaves the old one or the new one, never half of one. Every stage
writes its outputs through these (a leaf module: it imports nothing of swerl).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[Path], None], mode: int = 0o644) -> Path:
    """Call ``write(tmp)`` on a temp path in ``path``'s folder (created if missing), then rename it to ``path``.

    Args:
        path: the file to (re)place.
        write: writes the whole content to the path it is given.
        mode: permission bits of the result (``mkstemp`` makes 0600; outputs are meant to be read).
    Returns: ``path``. The temp file is removed when ``write`` raises.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data), mode)


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), mode)


def atomic_write_json(path: Path, payload: object, indent: int | None = 2, mode: int = 0o644) -> Path:
    """Write ``payload`` as JSON (plus a newline) to ``path`` atomically; non-JSON values via ``str``."""
    return atomic_write_text(path, json.dumps(payload, indent=indent, default=str) + "\n", mode)


def fsync_tree(folder: Path) -> None:
    """Flush every file below ``folder`` to disk (before a rename makes the folder visible)."""
    for p in Path(folder).rglob("*"):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())


def replace_dir(tmp: Path, final: Path, fsync: bool = True) -> Path:
    """Make the finished folder ``tmp`` appear as ``final`` in one rename (same filesystem).

    An existing ``final`` (e.g. a step saved again after a resume) is first renamed aside, then
    removed once ``tmp`` stands in its place.

    Args:
        tmp: the complete folder. final: its name once published.
        fsync: flush ``tmp``'s files first, so a power loss cannot publish empty files.
    Returns: ``final``.
    """
    tmp, final = Path(tmp), Path(final)
    if fsync:
        fsync_tree(tmp)
    if final.exists():
        trash = final.with_name(f".old-{final.name}-{os.getpid()}")
        os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, final)
    return final


def atomic_dir(path: Path, write: Callable[[Path], None], fsync: bool = True) -> Path:
    """Call ``write(tmp)`` on a new temp folder beside ``path``, then :func:`replace_dir` it to ``path``.

    Returns: ``path``. The temp folder is removed when ``write`` raises.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{path.name}.", dir=path.parent))
    try:
        write(tmp)
        return replace_dir(tmp, path, fsync)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class TooManyEntries(Exception):
    """:func:`walk_tree` met more entries than its ``limit``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"over {limit} entries")
        self.limit = limit


def walk_tree(root: str, limit: int | None = None):  # noqa: ANN201 - Iterator[tuple[str, os.stat_result]]
    """``(path, lstat)`` of every entry below ``root``, depth first, without recursion (a tree of any
    depth costs no Python stack) and without following links; entries that vanish or cannot be read
    (a path past PATH_MAX, a folder without permission) are skipped: callers that must not miss them
    measure with a tool that can (``du``).

    Raises:
        TooManyEntries: more than ``limit`` entries (None: no limit); no more than ``limit`` + 1
            are read, so the cost of a tree of millions of files is bounded by the caller.
    """
    stack = [root]
    seen = 0
    while stack:
        folder = stack.pop()
        found = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    seen += 1
                    if limit is not None and seen > limit:
                        raise TooManyEntries(limit)
                    found.append((entry.path, entry.stat(follow_symlinks=False)))
        except OSError:
            continue
        for path, st in found:
            yield path, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
