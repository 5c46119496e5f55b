"""The container half of the tamper signal: judge what the agent's container holds at
verification, against its pristine image, without running anything in it.

Runs after the agent's processes are killed and before the tests (in the clean room: before
the agent's container is removed). Two parts: every change against the image goes through the
path rules of :mod:`~swerl.sandbox.tamper.territory`, and the text of the files the agent
wrote (its work product first, the modules the tests import leading, then anything else it added
outside the library folders) goes through the text rules of :mod:`~swerl.sandbox.tamper.text`:
all of them for the code the verifier runs (:mod:`~swerl.sandbox.tamper.reach`), the rules of
any text for the rest. Files are read through
:class:`~swerl.sandbox.runtime.layer.LayerReader` (the engine, or its storage on this host).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from importlib.machinery import EXTENSION_SUFFIXES

from swerl.errors import SandboxError, SandboxTimeout
from swerl.fileio import TooManyEntries
from swerl.sandbox.runtime.layer import MAX_CHANGES, Change, LayerReader
from swerl.sandbox.tamper.reach import VerifierReach, import_closure, imported_modules
from swerl.sandbox.tamper.territory import LIB_DIRS, Territory, change_reasons, python_library
from swerl.sandbox.tamper.inprocess import in_process_reasons
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
                         max_changes: int = MAX_CHANGES, reach: VerifierReach | None = None) -> list[str]:
    """Tamper reasons of one container, each once, at most :data:`MAX_REASONS` (then a count).

    Args:
        reader: the container's reader.
        work_paths: the declared work product; None = the image's working folder.
        max_changes: most changed paths read (``SandboxConfig.tamper_scan_max_changes``).
        reach: how the task's verifier reads the container (None: the widest, any verifier).

    Never raises: an engine failure is logged and yields the reasons found so far (none). A container
    the scan cannot see whole is itself a reason (``scan: ...``): over ``max_changes`` changed
    paths, or changes that took past the Docker deadline to read; a flood of empty files must not
    leave the scan blind and the episode unflagged.
    """
    try:
        changes = [c for c in await reader.changes(max_changes) if c.path not in SWERL_FILES]
        paths = list(work_paths) if work_paths is not None else [p for p in [reader.workdir] if p]
        territory = Territory.of(reader.env, paths, reach)
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
    """Text rules over the files the agent added or changed: the work product's modules first (the
    modules the tests import leading), then its other files, then anything else it added outside
    library folders (those are judged by path); binary files skipped. Every rule for the code the
    verifier runs, the rules of any text for the rest. A work product with more changed modules
    than the scan reads, or a compiled module where the tests import from, is itself a reason: the
    scan cannot read what such code does."""
    limit = MAX_TEXT_FILES_LOCAL if reader.reads_host else MAX_TEXT_FILES_REMOTE
    written = [c.path for c in changes if c.kind != "deleted" and not _in_library(c.path)]
    in_work = [p for p in written if _in_work(p, territory)]
    roots = _import_roots(territory)
    tops = _tops(territory.reach.entry_modules or frozenset())
    modules = [p for p in in_work if p.endswith(".py")]
    leading = [p for p in modules if _top_module(p, roots) in tops]
    reasons: list[str] = []
    if len(modules) > limit:
        reasons.append(f"scan: the work product has {len(modules)} changed Python modules; the scan reads {limit}")
    compiled = [p for p in in_work if p.endswith(tuple(EXTENSION_SUFFIXES)) and _top_module(p, roots) is not None]
    reasons += [f"compiled-module: {p} is compiled code where the tests import from" for p in compiled[:4]]
    texts: dict[str, str] = {}
    unreadable: dict[str, str] = {}  # module -> why the scan cannot read it as Python reads it
    for path in dict.fromkeys([*leading, *modules, *in_work, *written]):
        if len(texts) >= limit:
            break
        data = await reader.read(path, MAX_TEXT_BYTES + 1)
        if path in modules:
            text, why = python_text(data)
            texts[path] = text
            if why:
                unreadable[path] = why
        elif data is not None and b"\0" not in data[:8192]:
            texts[path] = data[:MAX_TEXT_BYTES].decode("utf-8", "replace")
        elif data is not None:
            texts[path] = ""  # binary: read, counted, not scanned
    runs = _runs(texts, territory)
    in_process = territory.reach.in_process
    for path, text in texts.items():
        judged = _in_work(path, territory) and (runs is None or path in runs)
        reasons += text_reasons(text, path, runs=judged)
        if judged and path in unreadable:
            reasons.append(f"scan: {path} {unreadable[path]}; a module the tests may import is judged whole or not at all")
        elif judged and path.endswith(".py"):
            reasons += module_reasons(text, path)
            if in_process:
                reasons += await _in_process_reasons(text, path, roots, reader, territory.reach.image_text(path))
    return reasons


async def _in_process_reasons(text: str, path: str, roots: Sequence[str], reader: LayerReader,
                              image_text: str | None) -> list[str]:
    """:func:`~swerl.sandbox.tamper.text.in_process_reasons` of one module the tests import in
    process, and a reason for each of its imports that is neither the standard library's nor the
    work product's own (a module or package under the folders the tests import from)."""
    reasons, others = in_process_reasons(text, path, image_text)
    for name in others[:8]:
        candidates = [f"{root}/{name}{suffix}" for root in roots for suffix in ("", ".py")]
        found = [await reader.stat(candidate) for candidate in candidates]
        if not any(found):
            reasons.append(f"test-framework: {path} imports {name}, which is neither the work product's nor a "
                           "standard-library module code imported into the tests' interpreter may use")
            break
    return reasons


def python_text(data: bytes | None) -> tuple[str, str]:
    """The text of a module as the interpreter decodes it (its coding line or BOM,
    ``importlib.util.decode_source``) and why the scan cannot judge it ("" when it can): not a
    regular file (a link, where the tests import from), over :data:`MAX_TEXT_BYTES`, a NUL byte,
    undecodable, or not Python that parses."""
    import ast
    from importlib.util import decode_source

    if data is None:
        return "", "is not a regular file (a link or a special file)"
    if len(data) > MAX_TEXT_BYTES:
        return "", f"is over the {MAX_TEXT_BYTES >> 10} KiB the scan reads"
    if b"\0" in data:
        return "", "holds a NUL byte"
    try:
        text = decode_source(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as err:
        return "", f"cannot be decoded as Python source ({type(err).__name__})"
    try:
        ast.parse(text)
    except (SyntaxError, ValueError) as err:
        return text, f"does not parse as Python ({type(err).__name__})"
    return text, ""


def _runs(texts: dict[str, str], territory: Territory) -> set[str] | None:
    """The work product's files the verifier runs, None for all of them (any verifier but swerl's,
    or a module that loads code dynamically)."""
    entry = territory.reach.entry_modules
    if entry is None:
        return None
    return runs_of(texts, _import_roots(territory), entry, [p for p in texts if _in_work(p, territory)])


def runs_of(texts: Mapping[str, str], roots: Sequence[str], entry: Iterable[str], changed: Iterable[str]) -> set[str] | None:
    """Which of the ``changed`` modules importing the ``entry`` modules runs (None: any file may).

    ``texts`` may hold only the changed files (the container scan reads no others): a package's
    ``__init__`` the agent left as it was is then unread, so the modules it imports cannot be
    followed. A changed module of a package the tests import counts as run whether or not the
    closure reaches it, and the closure follows its imports too (a dynamic loader in it: None)."""
    tops = _tops(entry)
    changed = [p for p in changed if p.endswith(".py")]
    inside = [p for p in changed if _top_module(p, roots) in tops and not _is_test_file(p)]
    names = {name for name in (_module_name(p, roots) for p in inside) if name}
    closure = import_closure({p: texts[p] for p in texts if p.endswith(".py")}, roots, {*entry, *names})
    if closure is None:
        return None
    return {p for p in changed if p in closure or p in inside}


def _module_name(path: str, roots: Sequence[str]) -> str | None:
    """``/app/pkg/core.py`` -> ``pkg.core`` (``pkg/__init__.py`` -> ``pkg``) under the longest root."""
    for root in sorted(roots, key=len, reverse=True):
        if path.startswith(root.rstrip("/") + "/") and path.endswith(".py"):
            parts = path[len(root.rstrip("/")) + 1 : -3].split("/")
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None
    return None


def _is_test_file(path: str) -> bool:
    """A file pytest would collect or read as configuration (``test_*.py``, ``*_test.py``,
    ``conftest.py``): an agent's own tests import pytest; they count as run only when an import reaches them."""
    name = path.rsplit("/", 1)[-1]
    return name == "conftest.py" or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))


def _tops(entry: Iterable[str]) -> set[str]:
    return {name.split(".")[0] for name in entry}


def _import_roots(territory: Territory) -> list[str]:
    """The folders the tests import from: the verifier's ``pythonpath`` when it pins one, else the
    work product's folders."""
    return list(territory.reach.import_roots or territory.work_paths)


def _in_work(path: str, territory: Territory) -> bool:
    return any(path == w or path.startswith(w + "/") for w in territory.work_paths)


def _top_module(path: str, roots: Sequence[str]) -> str | None:
    """The top-level module name a path under one of the import ``roots`` belongs to
    (``/app/pkg/x.py`` -> ``pkg``; ``/app/m.cpython-311-x86_64-linux-gnu.so`` -> ``m``)."""
    for root in sorted(roots, key=len, reverse=True):
        if path.startswith(root + "/"):
            return path[len(root) + 1 :].split("/", 1)[0].split(".", 1)[0]
    return None


def _in_library(path: str) -> bool:
    return python_library(path) is not None or any(path == d or path.startswith(d + "/") for d in LIB_DIRS)


def static_in_process_reasons(files: Mapping[str, str], roots: Sequence[str], test_sources: Iterable[str],
                              changed: Iterable[str]) -> list[str]:
    """The module rules the container scan applies to an in-process task's changed modules
    (:func:`module_reasons`, :func:`~swerl.sandbox.tamper.inprocess.in_process_reasons`, imports
    that are neither the standard library's nor the work product's), read from files on the host
    before any sandbox runs: what ``swerl tasks mine`` checks of an oracle before proving it.

    Args:
        files: ``{"/app/x.py": text}``, the work product as the oracle leaves it.
        roots: the folders the tests import from (``/app``, ``/app/src``).
        test_sources: the texts of the test files that judge it (their imports are the entry modules).
        changed: the files the oracle writes (the scan judges those, as it judges an agent's).

    Returns: the reasons (empty when the oracle passes), each judged module taken as the image's own
    (its equality definitions are the project's).
    """
    entry = imported_modules(test_sources)
    runs = runs_of(files, roots, entry, changed) if entry else None
    judged = sorted(p for p in changed if p in files and (runs is None or p in runs))
    reasons: list[str] = []
    for path in judged:
        text = files[path]
        reasons += module_reasons(text, path)
        found, others = in_process_reasons(text, path, image_text=text)
        reasons += found
        for name in others[:8]:
            if not any(f"{root.rstrip('/')}/{name}{suffix}" in files for root in roots for suffix in (".py", "/__init__.py")):
                reasons.append(f"test-framework: {path} imports {name}, which is neither the work product's nor a "
                               "standard-library module code imported into the tests' interpreter may use")
                break
    return reasons
