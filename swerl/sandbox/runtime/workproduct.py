"""The agent's work product as it travels to the clean room: every member of the archives read
out of the agent's container is checked, and a new tar that swerl writes itself carries what passes
(:func:`bundle`, joined with ``tests/``; run as ``python -m`` this module is the child process
that :func:`~swerl.sandbox.runtime.verification.bundle_by_deadline` kills at its deadline).

The archives come from the Docker engine's archive API (``get_archive``, produced by the daemon
itself, never by a program of the agent's container), but nothing here trusts them either: the
same rules hold for any reader. A member is kept only when all of these hold, else it is dropped
and counted under its reason (:attr:`WorkProductStats.dropped`):

- its name is relative, has no ``..`` and lies at or below a declared path (``outside``,
  ``absolute``, ``dotdot``);
- it is a regular file, a folder, a symlink or a hard link (``special``: devices, fifos, ...);
- it is no Python bytecode: nothing named ``*.pyc`` or ``*.pyo`` and nothing at or below a
  ``__pycache__`` folder (``bytecode``). An unchecked hash-based pyc (PEP 552) is imported without
  its source being read, and a sourceless ``.pyc`` module is imported as it stands, so bytecode
  would carry code that no text rule reads; the verifier compiles every module from its source;
- no folder above it is a symlink or a hard link (``below_link``) or any other non-folder
  (``below_file``): nothing is ever written through a link;
- a symlink's target, followed step by step through the archive's own symlinks (at most 40, as the
  kernel does), never leaves the declared path it lies in; a link at a declared path itself is
  never kept (``link_out``);
- a hard link names a kept regular file of the same declared path (``link_out``).

Names are normalized (no ``.``, no doubled ``/``); when a name occurs twice the last wins, as tar
extraction would have it. The check costs time linear in the bytes of the names and link targets
(a member is kept only when the folder above it was kept; every name is a node of one tree, so no
ancestor is rebuilt or looked up again), and those are capped (:data:`MAX_NAME_BYTES`). The new tar holds folders first (parents before children), then regular
files, then hard links, then symlinks, so no member is ever extracted through a link, and a
symlink is created only after everything else; modes lose their setuid/setgid bits and every
member is owned by root. Extracting it at ``/`` (after the declared paths were cleared) cannot
write outside the declared paths.
"""

from __future__ import annotations

import io
import json
import posixpath
import sys
import tarfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from swerl.errors import SandboxError
from swerl.sandbox.types import Outcome
from swerl.tasks.archive import add_tree

MAX_WORK_MEMBERS = 200_000
"""Most members a work product may hold (a guard against archives of millions of tiny files)."""
MAX_NAME_BYTES = 64 << 20
"""Most bytes of member names and link targets a work product may hold: the check costs time linear
in them (a guard against ~45,000 members at the bottom of a very deep folder)."""
MAX_LINK_HOPS = 40
"""Symlinks followed while resolving one target (Linux's MAXSYMLINKS)."""
BYTECODE_SUFFIXES = (".pyc", ".pyo")
_KINDS = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE)


@dataclass
class WorkProductStats:
    """What crossed to the clean room.

    Attributes:
        members: members written to the new tar.
        file_bytes: bytes of regular-file data written.
        dropped: ``{reason: members dropped}`` (reasons in the module docstring).
    """

    members: int = 0
    file_bytes: int = 0
    dropped: Counter[str] = field(default_factory=Counter)

    def note(self) -> str:
        """One clause for a trial's detail, ``""`` when nothing was dropped."""
        if not self.dropped:
            return ""
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.dropped.items()))
        return f"work product: {sum(self.dropped.values())} member(s) dropped ({reasons})"


class UnreadableWorkProduct(SandboxError):
    """An archive of the work product could not be read (malformed, truncated, too many members):
    outcome ``copy_out_error``; whose fault it is is decided by a control run."""

    def __init__(self, message: str) -> None:
        super().__init__(message, outcome=Outcome.copy_out_error)


@dataclass
class _Entry:
    name: str  # normalized, relative to /
    member: tarfile.TarInfo
    source: tarfile.TarFile
    rebase: str  # prepended to the names the archive holds (its link names included)
    root: str  # the declared path it lies in (normalized, relative to /)

    def hardlink_target(self) -> str | None:
        """The normalized name a hard link member points to (None with ``..``)."""
        parts = normalize(self.rebase + self.member.linkname)
        return "/".join(parts) if parts else None


def normalize(name: str) -> list[str] | None:
    """``name``'s components without ``""`` and ``"."``; None when one is ``..``."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return None if ".." in parts else parts


def _declared_root(rel: str, roots: list[str]) -> str | None:
    """The outermost declared path at or above ``rel``, or None."""
    above = [r for r in roots if rel == r or rel.startswith(r + "/")]
    return min(above, key=len) if above else None


class _Tree:
    """Every name of the archive (and every folder above one) as a node id, parents before
    children: a child is found from its parent and its last component in O(1), so walking a
    name costs its length, never its depth squared."""

    def __init__(self) -> None:
        self.parent: list[int] = [-1]  # node 0 is "/"
        self.children: dict[tuple[int, str], int] = {}

    def add(self, parts: list[str]) -> int:
        """The node of ``parts`` (relative to ``/``), created with its folders when missing."""
        node = 0
        for part in parts:
            child = self.children.get((node, part))
            if child is None:
                child = self.children[(node, part)] = len(self.parent)
                self.parent.append(node)
            node = child
        return node

    def find(self, parts: list[str]) -> int | None:
        node: int | None = 0
        for part in parts:
            node = self.children.get((node, part))
            if node is None:
                return None
        return node


def _resolves(tree: _Tree, link_parent: int, target: str, root: int, root_depth: int, links: dict[int, str]) -> bool:
    """Whether ``target``, followed from node ``link_parent`` (the link's folder), stays at or
    below node ``root`` (at depth ``root_depth``) at every step; symlinks met on the way (``links``:
    node -> target) are followed, at most :data:`MAX_LINK_HOPS` in all. Each step is O(1): the
    path walked is a stack of nodes (None below a name the archive does not hold)."""
    stack: list[int | None] = []
    if not target.startswith("/"):
        node = link_parent
        while node != 0:
            stack.append(node)
            node = tree.parent[node]
        stack.reverse()
    pending = list(reversed(target.split("/")))
    hops = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return False
            stack.pop()
        else:
            top = stack[-1] if stack else 0
            node = tree.children.get((top, part)) if top is not None else None
            stack.append(node)
            followed = links.get(node) if node is not None else None
            if followed is not None:
                hops += 1
                if hops > MAX_LINK_HOPS:
                    return False
                stack.pop()
                if followed.startswith("/"):
                    stack = []
                pending += reversed(followed.split("/"))
                continue
        if len(stack) < root_depth or stack[root_depth - 1] != root:
            return False
    return len(stack) >= root_depth and (root_depth == 0 or stack[root_depth - 1] == root)


def resolves_inside(link: str, target: str, root: str, links: dict[str, str]) -> bool:
    """Whether following ``target`` from the folder of symlink ``link`` stays at or below ``root``
    at every step (``..`` pops a component; a symlink of ``links`` met on the way is followed,
    at most :data:`MAX_LINK_HOPS` in all). Names are relative to ``/``; an absolute target
    starts from ``/``."""
    tree = _Tree()
    by_node = {tree.add(name.split("/")): target for name, target in links.items()}
    root_parts = root.split("/") if root else []
    return _resolves(tree, tree.add(link.split("/")[:-1]), target, tree.add(root_parts), len(root_parts), by_node)


def _read_entries(archives: list[tuple[IO[bytes], str]], roots: list[str], stats: WorkProductStats) -> dict[str, _Entry]:
    """Every acceptable-looking member by normalized name (the last occurrence wins); members
    outside the declared paths, with bad names or of special kinds are counted as dropped."""
    entries: dict[str, _Entry] = {}
    seen = name_bytes = 0
    for fileobj, rebase in archives:
        try:
            fileobj.seek(0)
            source = tarfile.open(fileobj=fileobj, mode="r:")
            for member in source:
                seen += 1
                if seen > MAX_WORK_MEMBERS:
                    raise UnreadableWorkProduct(f"the work product holds over {MAX_WORK_MEMBERS} members")
                name_bytes += len(member.name) + len(member.linkname)
                if name_bytes > MAX_NAME_BYTES:
                    raise UnreadableWorkProduct(f"the work product's member names pass {MAX_NAME_BYTES >> 20} MiB")
                reason, entry = _classify(member, source, rebase, roots)
                if entry is None:
                    stats.dropped[reason] += 1
                else:
                    entries.pop(entry.name, None)  # re-inserted last: the order of the final occurrence
                    entries[entry.name] = entry
            # tarfile ends quietly at a cut header: only a zero block after the last member ends an archive.
            fileobj.seek(source.offset)
            if fileobj.read(tarfile.BLOCKSIZE) != bytes(tarfile.BLOCKSIZE):
                raise UnreadableWorkProduct("the work product's archive is truncated (no end-of-archive block)")
        except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError) as err:
            raise UnreadableWorkProduct(f"the work product's archive is unreadable: {err}") from err
    return entries


def _classify(member: tarfile.TarInfo, source: tarfile.TarFile, rebase: str, roots: list[str]) -> tuple[str, _Entry | None]:
    """(why it is dropped, None) or ("", the entry) for one member read."""
    if member.name.startswith("/"):
        return "absolute", None
    parts = normalize(rebase + member.name)
    if parts is None:
        return "dotdot", None
    rel = "/".join(parts)
    root = _declared_root(rel, roots) if parts else None
    if root is None:
        return "outside", None
    if member.type not in _KINDS:
        return "special", None
    if "__pycache__" in parts or parts[-1].endswith(BYTECODE_SUFFIXES):
        return "bytecode", None
    return "", _Entry(rel, member, source, rebase, root)


def _check(entries: dict[str, _Entry], stats: WorkProductStats) -> list[_Entry]:
    """The entries that may cross, in O(total length of names and link targets): a member is kept
    only when the folder above it was kept (or, not in the archive, is kept by the same rule) and
    is a folder; a symlink only when it resolves inside its declared path; a hard link only to a
    kept regular file of its declared path. Drops are counted in ``stats``."""
    tree = _Tree()
    node_of = {name: tree.add(name.split("/")) for name in entries}
    entry_at = {node: entries[name] for name, node in node_of.items()}
    links = {node: e.member.linkname for node, e in entry_at.items() if e.member.issym()}
    roots = {e.root: tree.find(e.root.split("/")) for e in entries.values()}
    # Why each node's children cannot cross ("" = they may), in node order: parents come first.
    blocked = [""] * len(tree.parent)
    for node in range(1, len(tree.parent)):
        up = tree.parent[node]
        above = entry_at.get(up)
        if blocked[up]:
            blocked[node] = blocked[up]
        elif above is not None and not above.member.isdir():
            blocked[node] = "below_link" if above.member.issym() or above.member.islnk() else "below_file"
    reasons: dict[int, str] = {}
    for name, node in node_of.items():  # folders, files and symlinks first: hard links need their targets
        entry = entry_at[node]
        reason = blocked[node]
        if not reason and entry.member.issym():
            root = roots[entry.root]
            if entry.name == entry.root or root is None or not _resolves(
                    tree, tree.parent[node], entry.member.linkname, root, entry.root.count("/") + 1, links):
                reason = "link_out"
        reasons[node] = reason
    for name, node in node_of.items():
        entry = entry_at[node]
        if entry.member.islnk() and not reasons[node]:
            target = entry.hardlink_target()
            found = node_of.get(target) if target else None
            other = entry_at.get(found) if found is not None else None
            if (other is None or not other.member.isreg() or other.root != entry.root or entry.name == entry.root
                    or reasons[found]):
                reasons[node] = "link_out"
    kept: list[_Entry] = []
    for node, reason in reasons.items():
        if reason:
            stats.dropped[reason] += 1
        else:
            kept.append(entry_at[node])
    return kept


def write_work_product(
    archives: list[tuple[IO[bytes], str]], paths: list[str], out: tarfile.TarFile, prefix: str = ""
) -> WorkProductStats:
    """Check every member of ``archives`` and write the ones that pass to ``out``.

    Args:
        archives: ``(seekable tar file object, rebase)`` pairs; ``rebase`` is prepended to every
            member name (``get_archive`` names members from the path's basename: pass its parent,
            e.g. ``"srv/"`` for ``/srv/app``, ``""`` for ``/app``).
        paths: the declared absolute paths of the work product.
        out: the tar being written.
        prefix: prepended to every name written (a staging folder, or ``""`` for ``/``).

    Returns:
        What was written and what was dropped, by reason.

    Raises:
        UnreadableWorkProduct: an archive is malformed or truncated, or holds too many members.
    """
    roots = ["/".join(p) for p in (normalize(path) for path in paths) if p]
    stats = WorkProductStats()
    entries = _read_entries(archives, roots, stats)
    kept = _check(entries, stats)
    order = {tarfile.DIRTYPE: 0, tarfile.REGTYPE: 1, tarfile.AREGTYPE: 1, tarfile.LNKTYPE: 2, tarfile.SYMTYPE: 3}
    kept.sort(key=lambda e: (order[e.member.type], e.name.split("/")))
    try:
        for entry in kept:
            _write(entry, out, prefix, stats)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise UnreadableWorkProduct(f"the work product's archive is unreadable: {err}") from err
    return stats


def _write(entry: _Entry, out: tarfile.TarFile, prefix: str, stats: WorkProductStats) -> None:
    """Add one checked member to ``out``: normalized name, root's, no setuid/setgid bit."""
    member = entry.member
    info = tarfile.TarInfo(prefix + entry.name)
    info.type, info.mtime = member.type, member.mtime
    info.mode = member.mode & 0o1777
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if member.issym():
        info.linkname = member.linkname
        out.addfile(info)
    elif member.islnk():
        info.type = tarfile.LNKTYPE
        info.linkname = prefix + (entry.hardlink_target() or "")
        out.addfile(info)
    elif member.isreg():
        info.type, info.size = tarfile.REGTYPE, member.size
        out.addfile(info, entry.source.extractfile(member))
        stats.file_bytes += member.size
    else:
        out.addfile(info)
    stats.members += 1


def bundle(
    tests_dir: Path | None, work: list[tuple[IO[bytes], str]], paths: list[str], prefix: str = ""
) -> tuple[bytes, WorkProductStats]:
    """One tar holding the checked work product and ``tests/`` (as ``<prefix>tests/...``).

    Args:
        tests_dir: the task's ``tests/``; None when the tests belong to the verifier's own image
            (``Task.tests_in_verifier_image``: they are in its ``/tests`` already, never uploaded).
        work: ``(tar file object, rebase)`` pairs read out of the agent's container (see
            :func:`write_work_product`).
        prefix: a staging folder relative to ``/`` ending in ``/``, or ``""`` to extract at ``/``.

    Returns:
        (the tar's bytes, what crossed and what was dropped).

    Raises:
        UnreadableWorkProduct: an archive of the work product is malformed or truncated.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as out:
        stats = write_work_product(work, paths, out, prefix) if work else WorkProductStats()
        if tests_dir is not None:
            add_tree(out, tests_dir, f"{prefix}tests/")
    return buf.getvalue(), stats


def _check_main(request: str) -> int:
    """The child of :func:`~swerl.sandbox.runtime.verification.bundle_by_deadline`: bundle, write
    the tar, print what crossed as JSON."""
    req = json.loads(request)
    archives = [(open(path, "rb"), rebase) for path, rebase in req["work"]]  # noqa: SIM115 - closed below
    try:
        data, stats = bundle(Path(req["tests"]) if req["tests"] else None, archives, req["paths"], req["prefix"])
    except UnreadableWorkProduct as err:
        print(json.dumps({"unreadable": str(err)}))
        return 0
    finally:
        for fh, _ in archives:
            fh.close()
    Path(req["out"]).write_bytes(data)
    print(json.dumps({"members": stats.members, "file_bytes": stats.file_bytes, "dropped": dict(stats.dropped)}))
    return 0


__all__ = ["MAX_NAME_BYTES", "MAX_WORK_MEMBERS", "UnreadableWorkProduct", "WorkProductStats", "bundle", "resolves_inside",
           "write_work_product"]


if __name__ == "__main__":
    sys.exit(_check_main(sys.argv[1]))
