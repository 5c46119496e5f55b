"""Files in and out of a sandbox as tar streams (the Docker archive API's format, and what a
command's ``tar -x`` reads on its stdin)."""

from __future__ import annotations

import io
import tarfile
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import IO

from swerl.errors import SandboxError
from swerl.tasks.archive import add_tree


def tar_of_files(files: dict[str, tuple[bytes, int]]) -> bytes:
    """A tar archive (bytes) holding ``{absolute_path: (data, mode)}``, to be extracted at
    ``/`` (the daemon creates missing parent directories, mode 0755)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, (data, mode) in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_of_dir(local_dir: Path, dest: str) -> bytes:
    """A tar archive (bytes) of ``local_dir``'s contents placed under ``dest`` (absolute), to be
    extracted at ``/``, owned by root (containers run without CAP_CHOWN). Symlinks are stored as
    links, never followed."""
    buf = io.BytesIO()
    rel_dest = dest.strip("/")
    with tarfile.open(fileobj=buf, mode="w") as tar:
        add_tree(tar, local_dir, f"{rel_dest}/" if rel_dest else "")
    return buf.getvalue()


def file_from_tar(stream: bytes, max_bytes: int) -> bytes:
    """The one regular file in a ``get_archive`` tar stream (first ``max_bytes`` bytes).

    Raises:
        SandboxError: the path is not a regular file.
    """
    with tarfile.open(fileobj=io.BytesIO(stream), mode="r") as tar:
        for member in tar:
            if member.isfile():
                fh = tar.extractfile(member)
                assert fh is not None
                return fh.read(max_bytes)
    raise SandboxError("not a regular file")


class ArchiveTooLarge(Exception):
    """A ``get_archive`` stream passed the limit it was read under (:func:`spool_archive`)."""


def spool_archive(stream: Generator[bytes, None, None], limit_bytes: int) -> IO[bytes] | None:
    """The bytes of ``stream`` in a temporary file (in memory up to 8 MiB, then on disk), rewound;
    None once they pass ``limit_bytes`` (the stream is closed: the engine stops sending)."""
    spool = tempfile.SpooledTemporaryFile(max_size=8 << 20)
    size = 0
    try:
        for chunk in stream:
            size += len(chunk)
            if size > limit_bytes:
                spool.close()
                return None
            spool.write(chunk)
    except BaseException:
        spool.close()
        raise
    finally:
        stream.close()
    spool.seek(0)
    return spool
