"""The container half of the tamper signal: judge what the agent's container holds at
verification, against its pristine image, without running anything in it.

Runs after the agent's processes are killed and before the tests (in the clean room: before
the agent's container is removed). Two parts: every change against the image goes through the
path rules of :mod:`~swerl.sandbox.tamper.territory`, and the text of the files the agent
wrote (its work product first, then anything else it added outside the library folders) goes
through the text rules of :mod:`~swerl.sandbox.tamper.text`. Files are read through
:class:`~swerl.sandbox.runtime.layer.LayerReader` (the engine, or its storage on this host).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from swerl.errors import SandboxError, SandboxTimeout
from swerl.fileio import TooManyEntries
from swerl.sandbox.runtime.layer import MAX_CHANGES, Change, LayerReader
from swerl.sandbox.tamper.territory import LIB_DIRS, Territory, change_reasons, python_library
from swerl.sandbox.tamper.text import module_reasons, text_reasons

log = logging.getLogger(__name__)
MAX_REASONS = 24
MAX_TEXT_FILES_LOCAL = 32  # files whose text is read from the engine's storage on this host (~0.1 ms each)
MAX_TEXT_FILES_REMOTE = 8  # ... through the engine's archive API (~80 ms of engine CPU each)
MAX_TEXT_BYTES = 256 << 10  # per file; text past it is not scanned
# What swerl itself writes in every trial container: the keeper's command and input files
# (runtime/keeper.py), which hold swerl's own last command (the scan's own kill, for one).
SWERL_FILES = frozenset({"/tmp/.swerl-keeper", "/tmp/.swerl-keeper/cmd.sh", "/tmp/.swerl-keeper/cmd.in"})


async def scan_container(reader: LayerReader, work_paths: Sequence[str] | None,
                         max_changes: int = MAX_CHANGES) -> list[str]:
    """Tamper reasons of one container, each once, at most :data:`MAX_REASONS` (then a count).

    Args:
        reader: the container's reader.
        work_paths: the declared work product; None = the image's working folder.
        max_changes: most changed paths read (``SandboxConfig.tamper_scan_max_changes``).

    Never raises: an engine failure is logged and yields the reasons found so far (none). A container
    the scan cannot see whole is itself a reason (``scan: ...``): over ``max_changes`` changed
    paths, or changes that took past the Docker deadline to read; a flood of empty files must not
    leave the scan blind and the episode unflagged.
    """
    try:
        changes = [c for c in await reader.changes(max_changes) if c.path not in SWERL_FILES]
        paths = list(work_paths) if work_paths is not None else [p for p in [reader.workdir] if p]
        territory = Territory.of(reader.env, paths)
        by_path = await change_reasons(changes, territory, reader)
        # A file already judged by its path is not read again for its text.
        reasons = [*by_path.values(), *await _text_reasons([c for c in changes if c.path not in by_path], territory, reader)]
    except TooManyEntries:
        return [f"scan: the container changed over {max_changes} paths; the scan stopped there"]
    except SandboxTimeout as err:
        log.warning("tamper scan of container %s: %s", reader.container_id[:12], err)
        return [f"scan: reading the container's changes took too long ({err})"]
    except (SandboxError, OSError) as err:
        log.warning("tamper scan of container %s failed: %s", reader.container_id[:12], err)
        return []
    return cap(list(dict.fromkeys(reasons)))


def cap(reasons: list[str], limit: int = MAX_REASONS) -> list[str]:
    """``reasons`` cut to ``limit`` entries, the last one counting what was left out."""
    if len(reasons) <= limit:
        return reasons
    return [*reasons[: limit - 1], f"... and {len(reasons) - limit + 1} more"]


def merge(*reason_lists: Sequence[str]) -> list[str]:
    """The reasons of several sources (the container, the commands), each once, capped."""
    return cap(list(dict.fromkeys(r for reasons in reason_lists for r in reasons)))


async def _text_reasons(changes: Sequence[Change], territory: Territory, reader: LayerReader) -> list[str]:
    """Text rules over the files the agent added or changed: the work product's first, then the
    others outside library folders (those are judged by path), binary files skipped."""
    limit = MAX_TEXT_FILES_LOCAL if reader.reads_host else MAX_TEXT_FILES_REMOTE
    written = [c.path for c in changes if c.kind != "deleted" and not _in_library(c.path)]
    in_work = [p for p in written if any(p == w or p.startswith(w + "/") for w in territory.work_paths)]
    ordered = list(dict.fromkeys([*in_work, *written]))
    reasons: list[str] = []
    read = 0
    for path in ordered:
        if read >= limit:
            break
        data = await reader.read(path, MAX_TEXT_BYTES)
        if data is None:
            continue
        read += 1
        if b"\0" in data[:8192]:
            continue
        text = data.decode("utf-8", "replace")
        reasons += text_reasons(text, path) + (module_reasons(text, path) if path.endswith(".py") else [])
    return reasons


def _in_library(path: str) -> bool:
    return python_library(path) is not None or any(path == d or path.startswith(d + "/") for d in LIB_DIRS)
