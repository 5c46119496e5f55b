"""Clean-room verification: which mode a trial uses, and how the agent's work product travels.

After the agent phase the work product (the declared ``artifacts``, e.g. ``["/app"]``, in either
spelling, plus Harbor's ``/logs/artifacts``) is read out of the agent's container, the agent's
container is removed, and the tests run in a fresh container of the pristine verifier image
(the task image, or a separate verifier environment's: Harbor's ``environment_mode =
"separate"``) that holds the work product and nothing else the agent did (binaries on PATH,
site-packages, config files in ``/``, ``/logs``, ``/tests``, processes).

Reading it out runs nothing of the agent's container: the engine kills the container (every
process in it dies at once, so nothing changes the work product while it is read), then its
archive API (``get_archive``, a tar that dockerd itself writes, from a stopped container) reads
each declared path, streamed and capped at ``SandboxConfig.max_artifact_mb``. Docker 20.10
re-executes itself to chroot for it: ~0.2 s of daemon time per path here.

Writing it in: :func:`bundle` checks every member of those archives
(:mod:`swerl.sandbox.runtime.workproduct`: nothing absolute, no ``..``, nothing outside a declared
path, nothing below a link, symlinks only when they resolve inside their declared path, hard
links only to a kept file, no devices or fifos, no setuid bits, all owned by root) and writes a
new tar of what passes, folders first and symlinks last, joined with ``tests/``. The verifier
script extracts it at ``/`` with the clean container's own (pristine) ``tar``, after clearing the
declared paths (so a file the agent deleted from the image's ``/app`` is gone in the clean room
too); no member of it can be written through a link, so nothing lands outside a declared path.
Tests that belong to a separate verifier's own image are in its ``/tests`` already and are not
uploaded again.
"""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from swerl.errors import SandboxError, SandboxTimeout
from swerl.sandbox.runtime.workproduct import UnreadableWorkProduct, WorkProductStats, write_work_product
from swerl.sandbox.types import Outcome, Verification
from swerl.tasks.archive import add_tree

if TYPE_CHECKING:
    from swerl.sandbox.types import SandboxConfig
    from swerl.tasks.task_folder import Task


def verification_mode(task: Task, config: SandboxConfig) -> Verification:
    """Where ``task``'s tests run under ``config.verification`` (see its field description): the
    run's choice, else the task's (:attr:`Task.auto_verification`); tests that live in a separate
    verifier's own image can only run there (the clean room)."""
    if task.tests_in_verifier_image:
        return "clean_room"
    if config.verification != "auto":
        return config.verification
    return task.auto_verification


def bundle(
    tests_dir: Path | None, work: list[tuple[IO[bytes], str]], paths: list[str], prefix: str = ""
) -> tuple[bytes, WorkProductStats]:
    """One tar holding the checked work product and ``tests/`` (as ``<prefix>tests/...``).

    Args:
        tests_dir: the task's ``tests/``; None when the tests belong to the verifier's own image
            (``Task.tests_in_verifier_image``: they are in its ``/tests`` already, never uploaded).
        work: ``(tar file object, rebase)`` pairs read out of the agent's container (see
            :func:`~swerl.sandbox.runtime.workproduct.write_work_product`).
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


async def bundle_by_deadline(
    tests_dir: Path | None, work: list[tuple[IO[bytes], str]], paths: list[str], prefix: str, deadline_s: float
) -> tuple[bytes, WorkProductStats]:
    """:func:`bundle` in a child process that is killed at ``deadline_s``: a check that runs long
    (an archive made to be slow to check) ends with its deadline and leaves nothing running,
    where a worker thread abandoned at its deadline would go on holding a core and a slot of the
    engine's call pool. The archives cross as files of a private temporary folder.

    Raises:
        SandboxTimeout: the check ran past ``deadline_s`` (its process was killed).
        UnreadableWorkProduct: an archive of the work product is malformed or truncated.
    """
    with tempfile.TemporaryDirectory(prefix="swerl-bundle-") as tmp:
        inputs = await asyncio.to_thread(_spill, work, tmp)
        request = json.dumps({"tests": str(tests_dir) if tests_dir is not None else None, "work": inputs,
                              "paths": paths, "prefix": prefix, "out": f"{tmp}/bundle.tar"})
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "swerl.sandbox.runtime.cleanroom", request,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), deadline_s)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise SandboxTimeout(f"checking the work product ran past {deadline_s:g} s; its process was killed") from None
        except BaseException:  # the trial cancelled: the check dies with it
            proc.kill()
            await proc.wait()
            raise
        try:
            answer = json.loads(out.decode() or "{}")
        except ValueError:
            answer = {}
        if "unreadable" in answer:
            raise UnreadableWorkProduct(answer["unreadable"])
        if proc.returncode != 0 or "members" not in answer:
            raise SandboxError(f"the work-product check failed (exit {proc.returncode}): {err.decode(errors='replace')[-500:]}")
        stats = WorkProductStats(answer["members"], answer["file_bytes"], Counter(answer["dropped"]))
        return await asyncio.to_thread(Path(f"{tmp}/bundle.tar").read_bytes), stats


def _spill(work: list[tuple[IO[bytes], str]], folder: str) -> list[tuple[str, str]]:
    """Each archive of ``work`` as a file of ``folder``: ``(path, rebase)`` pairs."""
    files = []
    for i, (spool, rebase) in enumerate(work):
        path = f"{folder}/work-{i}.tar"
        spool.seek(0)
        with open(path, "wb") as fh:
            shutil.copyfileobj(spool, fh, 1 << 20)
        files.append((path, rebase))
    return files


def _check_main(request: str) -> int:
    """The child of :func:`bundle_by_deadline`: bundle, write the tar, print what crossed as JSON."""
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


def too_large(task: Task, cap_mb: int) -> Exception:
    """The error of a work product over ``SandboxConfig.max_artifact_mb`` (outcome disk_limit; a
    control run decides whose fault it is)."""
    return SandboxError(
        f"{task.name}: the work product {task.clean_room_paths} is over {cap_mb} MiB "
        "(SandboxConfig.max_artifact_mb)", outcome=Outcome.disk_limit,
    )


if __name__ == "__main__":
    sys.exit(_check_main(sys.argv[1]))
