"""Atomic file writes: a temp file beside the target, renamed over it, so a crash or a kill leaves
the old file or the new one, never half of one. Every stage writes its outputs through these.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


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


def atomic_write_json(path: Path, payload: Any, indent: int | None = 2, mode: int = 0o644) -> Path:
    """Write ``payload`` as JSON (plus a newline) to ``path`` atomically; non-JSON values via ``str``."""
    return atomic_write_text(path, json.dumps(payload, indent=indent, default=str) + "\n", mode)
