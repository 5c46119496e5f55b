"""Clean-room verification: which mode a trial uses, and how the agent's work product travels.

After the agent phase the work product (the declared ``artifacts``, e.g. ``["/app"]``, in either
spelling, plus Harbor's ``/logs/artifacts``) is read out of the agent's container, the agent's
container is removed, and the tests run in a fresh container of the pristine verifier image
(the task image, or a separate verifier environment's: Harbor's ``environment_mode =
"separate"``) that holds the work product and nothing else the agent did (binaries on PATH,
site-packages, config files in ``/``, ``/logs``, ``/tests``, processes).

Reading it out: one keeper command in the agent's container kills every process there, then
``tar -c`` of the paths, base64 on stdout. That container is the agent's, so its ``tar`` may
lie: whatever comes back is checked here (:func:`bundle`): only regular files, directories and
links at or below a declared path, no ``..``, no absolute names, no device or fifo, no setuid
bit, owned by root. A lying ``tar`` can therefore only deliver what the agent could have put in
its work dir anyway. When the keeper path fails (no tar or base64, a broken channel), the
Docker archive API (``get_archive``, done by the daemon) reads the paths instead; it costs
~80 ms of daemon CPU per path here (Docker 20.10 re-executes itself to chroot), the keeper
path a few ms inside the container.

Writing it in: :func:`bundle` joins the checked work product and ``tests/`` into one tar that
the verifier script extracts at ``/`` with the clean container's own (pristine) ``tar``,
after clearing the declared paths (so a file the agent deleted from the image's ``/app`` is
gone in the clean room too). Tests that belong to a separate verifier's own image are in its
``/tests`` already and are not uploaded again.
"""

from __future__ import annotations

import base64
import binascii
import io
import shlex
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from swerl.errors import SandboxError
from swerl.sandbox.types import Outcome, Verification
from swerl.tasks.archive import add_tree

if TYPE_CHECKING:
    from swerl.sandbox.types import SandboxConfig
    from swerl.tasks.task_folder import Task

_KINDS = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE)


def verification_mode(task: Task, config: SandboxConfig) -> Verification:
    """Where ``task``'s tests run under ``config.verification`` (see its field description): the
    run's choice, else the task's (:attr:`Task.auto_verification`); tests that live in a separate
    verifier's own image can only run there (the clean room)."""
    if task.tests_in_verifier_image:
        return "clean_room"
    if config.verification != "auto":
        return config.verification
    return task.auto_verification


def copy_out_script(paths: list[str]) -> str:
    """Bash run in the agent's container: kill every process (but PID 1 and itself), then
    write a base64 tar of the ``paths`` that exist (names relative to ``/``) to stdout."""
    rel = " ".join(shlex.quote(p.lstrip("/")) for p in paths)
    return (
        "kill -KILL -1 2>/dev/null; kill -KILL -1 2>/dev/null\n"
        "set -o pipefail\npresent=()\n"
        f'for p in {rel}; do if [ -e "/$p" ] || [ -L "/$p" ]; then present+=("$p"); fi; done\n'
        '[ ${#present[@]} -eq 0 ] && exit 0\n'
        'tar -c -f - -C / -- "${present[@]}" 2>/dev/null | base64 -w0\n'
    )


def decode_copy_out(output: str) -> bytes | None:
    """The tar bytes of :func:`copy_out_script`'s output, or None when it is not clean base64."""
    text = output.strip()
    if not text:
        return b""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _checked_name(name: str, allowed: list[str]) -> str | None:
    """``name`` normalized (relative to ``/``) when it lies at or below an allowed path, else None."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    rel = "/".join(parts)
    if any(rel == a or rel.startswith(a + "/") for a in allowed):
        return rel
    return None


def add_work_product(out: tarfile.TarFile, archive: bytes, paths: list[str], prefix: str = "", rebase: str = "") -> int:
    """Copy the checked members of ``archive`` (a tar of the work product) into ``out``.

    Args:
        paths: the declared absolute paths; members outside them are dropped.
        prefix: prepended to every name in ``out`` (a staging folder, or ``""`` for ``/``).
        rebase: prepended to every name read (``get_archive`` names members from the path's
            basename; pass the parent, e.g. ``"srv/"`` for ``/srv/app``).

    Returns:
        bytes of file data copied.
    """
    allowed = [p.strip("/") for p in paths]
    copied = 0
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as src:
        for member in src:
            rel = _checked_name(rebase + member.name, allowed)
            if rel is None or member.type not in _KINDS:
                continue
            info = tarfile.TarInfo(prefix + rel)
            info.type, info.mtime = member.type, member.mtime
            info.mode = member.mode & 0o1777  # no setuid/setgid
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            data = None
            if member.issym():
                info.linkname = member.linkname
            elif member.islnk():
                target = _checked_name(rebase + member.linkname, allowed)
                if target is None:
                    continue
                info.linkname = prefix + target
            elif member.isfile():
                fh = src.extractfile(member)
                data = fh.read() if fh is not None else b""
                info.size = len(data)
                copied += len(data)
            out.addfile(info, io.BytesIO(data) if data is not None else None)
    return copied


def bundle(tests_dir: Path | None, work: list[tuple[bytes, str]], paths: list[str], prefix: str = "") -> bytes:
    """One tar holding ``tests/`` (as ``<prefix>tests/...``) and the checked work product.

    Args:
        tests_dir: the task's ``tests/``; None when the tests belong to the verifier's own image
            (``Task.tests_in_verifier_image``: they are in its ``/tests`` already, never uploaded).
        work: ``(tar bytes, rebase)`` pairs (see :func:`add_work_product`).
        prefix: a staging folder relative to ``/`` ending in ``/``, or ``""`` to extract at ``/``.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as out:
        for archive, rebase in work:
            if archive:
                add_work_product(out, archive, paths, prefix, rebase)
        if tests_dir is not None:
            add_tree(out, tests_dir, f"{prefix}tests/")
    return buf.getvalue()


def too_large(task: Task, cap_mb: int) -> Exception:
    """The error of a work product over ``SandboxConfig.max_artifact_mb`` (outcome disk_limit)."""
    return SandboxError(
        f"{task.name}: the work product {task.clean_room_paths} is over {cap_mb} MiB "
        "(SandboxConfig.max_artifact_mb)", outcome=Outcome.disk_limit,
    )
