"""Verification: where a trial's tests run, how the agent's work product gets there, and the reward.

:func:`verify` is the one entry point (``Sandbox.verify`` calls it on itself). In order:

1. The mode (:func:`verification_mode`): ``same_container`` or ``clean_room``.
2. The container half of the tamper signal (:func:`~swerl.sandbox.tamper.scan.scan_container`),
   with every process of the agent's container dead: nothing that can end verification runs
   before it, and a verification that fails after it raises with its reasons.
3. Clean room only: the copy-out, then a fresh container of the verifier image.
4. The protocol of :mod:`~swerl.sandbox.runtime.verifier`: ``tests/`` (and the work product)
   sent in, ``bash /tests/test.sh`` run, the reward read.

The clean room: after the agent phase the work product (the declared ``artifacts``, e.g.
``["/app"]``, in either spelling, plus Harbor's ``/logs/artifacts``) is read out of the agent's
container, the agent's container is removed, and the tests run in a fresh container of the
pristine verifier image (the task image, or a separate verifier environment's: Harbor's
``environment_mode = "separate"``) that holds the work product and nothing else the agent did
(binaries on PATH, site-packages, config files in ``/``, ``/logs``, ``/tests``, processes).

Reading it out runs nothing of the agent's container: the engine kills the container (every
process in it dies at once, so nothing changes the work product while it is read), then its
archive API (``get_archive``, a tar that dockerd itself writes, from a stopped container) reads
each declared path, streamed and capped at ``SandboxConfig.max_artifact_mb``. Docker 20.10
re-executes itself to chroot for it: ~0.2 s of daemon time per path here.

Writing it in: :func:`~swerl.sandbox.runtime.workproduct.bundle` checks every member of those
archives (:mod:`swerl.sandbox.runtime.workproduct`: nothing absolute, no ``..``, nothing outside a
declared path, nothing below a link, symlinks only when they resolve inside their declared path,
hard links only to a kept file, no devices or fifos, no setuid bits, all owned by root) and writes a
new tar of what passes, folders first and symlinks last, joined with ``tests/``. The verifier
script extracts it at ``/`` with the clean container's own (pristine) ``tar``, after clearing the
declared paths (so a file the agent deleted from the image's ``/app`` is gone in the clean room
too); no member of it can be written through a link, so nothing lands outside a declared path.
Tests that belong to a separate verifier's own image are in its ``/tests`` already and are not
uploaded again.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

from swerl.errors import SandboxError, SandboxTimeout
from swerl.sandbox.runtime.channel import Command
from swerl.sandbox.runtime.files import ArchiveTooLarge
from swerl.sandbox.runtime.healthcheck import wait_healthy
from swerl.sandbox.runtime.verifier import VERIFY_OUTPUT_BYTES, VERIFY_SCRIPT, parse_sections, verdict
from swerl.sandbox.runtime.workproduct import UnreadableWorkProduct, WorkProductStats
from swerl.sandbox.tamper.reach import VerifierReach
from swerl.sandbox.tamper.scan import scan_container
from swerl.sandbox.types import Outcome, Verification

if TYPE_CHECKING:
    from swerl.sandbox.runtime.layer import LayerReader
    from swerl.sandbox.types import ExecResult, Placement, SandboxConfig, VerifierResult
    from swerl.tasks.task_folder import Task

_VERIFY_GRACE_S = 10.0
_Work = list[tuple[IO[bytes], str]]  # (rewound tar file object, rebase) per declared path read out


class Verified(Protocol):
    """The container handle verification works through: a started
    :class:`~swerl.sandbox.runtime.sandbox.Sandbox` (named by this interface, so the sandbox
    module can import this one and not the reverse). Each method's contract is the Sandbox's."""

    task: Task
    config: SandboxConfig
    placement: Placement

    @property
    def disk_exceeded(self) -> str | None: ...

    async def exec(self, command: str, timeout_s: float = ...) -> ExecResult: ...
    async def run(self, command: Command) -> ExecResult: ...
    async def stop(self) -> None: ...
    async def kill_processes(self) -> None: ...
    async def kill_from_outside(self) -> None: ...
    async def workdir(self) -> str: ...
    async def archive(self, path: str, limit_bytes: int) -> IO[bytes] | None: ...
    def layer_reader(self) -> LayerReader: ...
    async def replace_container(self) -> None: ...
    async def put_archive(self, archive: bytes) -> None: ...


def verification_mode(task: Task, config: SandboxConfig) -> Verification:
    """Where ``task``'s tests run under ``config.verification`` (see its field description): the
    run's choice, else the task's (:attr:`Task.auto_verification`); tests that live in a separate
    verifier's own image can only run there (the clean room)."""
    if task.tests_in_verifier_image:
        return "clean_room"
    if config.verification != "auto":
        return config.verification
    return task.auto_verification


async def verify(sb: Verified, timeout_s: float | None = None) -> VerifierResult:
    """Run the task's hidden tests in ``sb`` (docs/sandbox.md) and read the reward.

    First, with every process of the agent's container killed, the container half of the
    tamper scan (:func:`~swerl.sandbox.tamper.scan.scan_container`): nothing that can end
    verification runs before it, and a verification that fails after it raises with its reasons.

    Where: :func:`verification_mode`. Clean room: the engine kills the agent's container and reads
    the work product out of it (its archive API; a stopped container reads too), every member is
    checked and what passes is rewritten (:mod:`~swerl.sandbox.runtime.workproduct`), that
    container is removed, and the protocol runs in a fresh one of the pristine verifier image (the
    task's, or a separate verifier environment's, whose own ``/tests`` is then kept) holding only
    the work product. Same container: every process killed, then ``/logs/verifier`` and ``/tests``
    moved aside and recreated in a way the agent's permissions cannot block, then the protocol.
    Either way: ``tests/`` uploaded to ``/tests``, ``bash /tests/test.sh`` run (``[verifier] env``
    applied) under ``timeout_s`` (default: ``SandboxConfig.verifier_timeout_s``, else task.toml
    ``[verifier] timeout_sec``), every process left killed, then ``reward.txt`` else
    ``reward.json`` read. Never raises for a misbehaving verifier: the outcome says what happened;
    ``verification`` and ``verifier_image`` say where.

    Raises:
        SandboxError: only when the container/daemon fails (``outcome`` daemon_error, oom,
            start_error), the trial passed its disk budget or the work product the cap
            (``disk_limit``), the work product's archive is unreadable (``copy_out_error``), or
            the clean room's healthcheck never passed (``healthcheck_failed``); its ``tamper``
            holds the scan's reasons when the scan ran.
    """
    limit = timeout_s or sb.config.verifier_timeout_s or sb.task.config.verifier.timeout_sec
    began = time.monotonic()
    mode = verification_mode(sb.task, sb.config)
    # The container half of the tamper signal comes first: whatever ends verification after it
    # (the disk budget, a work product over its cap, a broken copy-out) keeps its reasons.
    if mode == "clean_room":  # the engine kills the agent's container: it reads the same stopped
        await sb.stop()
    tamper = await _scan_for_tamper(sb, kill_first=mode != "clean_room")
    try:
        raw, stats = await _verify_scanned(sb, mode, limit)
    except SandboxError as err:
        err.tamper = tamper
        raise
    if raw.timed_out:  # the stream outlived the deadline: kill everything from outside
        await sb.kill_from_outside()
    _check_disk(sb)
    result = verdict(parse_sections(raw.output), raw.timed_out, limit, time.monotonic() - began)
    note = stats.note()
    image = sb.placement.verifier_image if mode == "clean_room" else sb.placement.image
    update = {"verification": mode, "verifier_image": image, "work_product_dropped": dict(stats.dropped),
              "tamper": tamper}
    if note:
        update["detail"] = "; ".join(x for x in (result.detail, note) if x)
    return result.model_copy(update=update)


async def _scan_for_tamper(sb: Verified, kill_first: bool) -> list[str]:
    """The tamper reasons of the agent's container (:mod:`swerl.sandbox.tamper.scan`), after
    every process in it is killed (``kill_first``), so none changes it between scan and tests."""
    if not sb.config.tamper_scan:
        return []
    if kill_first:
        await sb.kill_processes()
    return await scan_container(sb.layer_reader(), sb.task.clean_room_paths, sb.config.tamper_scan_max_changes,
                                VerifierReach.of(sb.task))


async def _verify_scanned(sb: Verified, mode: Verification, limit: float) -> tuple[ExecResult, WorkProductStats]:
    """After the scan: the disk check, the copy-out and the switch (clean room), then the protocol."""
    _check_disk(sb)
    # Tests that belong to a separate verifier's own image are in its /tests (mode is then clean_room).
    tests = None if sb.task.tests_in_verifier_image else sb.task.tests_dir
    if mode == "clean_room":
        paths = await _work_paths(sb)
        work = await _copy_out(sb, paths)
    else:
        paths, work = [], []
    try:
        if mode == "clean_room":
            await _switch_container(sb)
        return await _deliver_and_test(sb, tests, work, paths, limit)
    finally:
        for spool, _ in work:
            spool.close()


def _check_disk(sb: Verified) -> None:
    if sb.disk_exceeded is not None:
        raise SandboxError(sb.disk_exceeded, outcome=Outcome.disk_limit)


async def _work_paths(sb: Verified) -> list[str]:
    """The declared work product (:attr:`Task.clean_room_paths`), else (clean room forced by
    the run) the image's WORKDIR."""
    if (declared := sb.task.clean_room_paths) is not None:
        return declared
    workdir = await sb.workdir()
    if workdir.rstrip("/") == "":
        raise SandboxError(
            f"{sb.task.path / 'task.toml'}: clean-room verification needs [verifier] artifacts "
            '(e.g. ["/app"]) and the image has no WORKDIR; declare them or verify same_container', outcome=Outcome.start_error,
        )
    return [workdir.rstrip("/")]


async def _copy_out(sb: Verified, paths: list[str]) -> _Work:
    """Read the work product out of the stopped agent's container (``Sandbox.stop``) without
    running anything of it: the engine's archive API reads each declared path that exists,
    streamed into temporary files, at most ``max_artifact_mb`` in all.

    Returns:
        ``(tar file object, rebase)`` pairs, rewound (see :func:`~swerl.sandbox.runtime.workproduct.bundle`).

    Raises:
        SandboxError: disk_limit (over the cap, or the container passed its disk budget),
            daemon_error (the container is gone).
    """
    budget = (sb.config.max_artifact_mb << 20) + (1 << 20)  # tar headers and padding on top of the data
    work: _Work = []
    try:
        for path in paths:
            try:
                spool = await sb.archive(path, budget - sum(_size(f) for f, _ in work))
            except ArchiveTooLarge:
                raise too_large(sb.task, sb.config.max_artifact_mb) from None
            if spool is not None:
                parent = path.rsplit("/", 1)[0].lstrip("/")
                work.append((spool, parent + "/" if parent else ""))
    except BaseException:
        for spool, _ in work:
            spool.close()
        raise
    return work


def too_large(task: Task, cap_mb: int) -> Exception:
    """The error of a work product over ``SandboxConfig.max_artifact_mb`` (outcome disk_limit; a
    control run decides whose fault it is)."""
    return SandboxError(
        f"{task.name}: the work product {task.clean_room_paths} is over {cap_mb} MiB "
        "(SandboxConfig.max_artifact_mb)", outcome=Outcome.disk_limit,
    )


def _size(spool: IO[bytes]) -> int:
    """Bytes in a rewound temporary file."""
    spool.seek(0, 2)
    size = spool.tell()
    spool.seek(0)
    return size


async def _switch_container(sb: Verified) -> None:
    """Remove the agent's container and continue in a fresh one of the verifier's image (the
    task's, or a separate verifier environment's); its healthcheck, if any, runs first."""
    await sb.replace_container()
    if (check := sb.task.config.verifier_environment.healthcheck) is not None:
        await wait_healthy(sb, check, "the verifier environment's healthcheck")


async def _deliver_and_test(
    sb: Verified, tests: Path | None, work: _Work, paths: list[str], limit: float
) -> tuple[ExecResult, WorkProductStats]:
    """Send ``tests`` and the checked work product in as one tar and run the protocol on it.

    The tar is checked and written in a child process killed at the verifier's time ``limit``
    (:func:`bundle_by_deadline`): up to ``MAX_WORK_MEMBERS`` members of the agent's
    choosing (links resolved through chains of up to 40) cost seconds of CPU, which on the event
    loop would stall every sandbox of the run (17 s for 199k chained links here), and a worker
    thread abandoned at its deadline would go on running and hold a slot of the engine's calls."""
    archive, stats = await bundle_by_deadline(tests, work, paths, "", limit)
    raw = await _run_verify_script(sb, "-", limit, tests is not None, archive, paths)
    if "\x1enotar\x1f" in raw.output:  # no tar in the image: the daemon copies the files in first
        staging = f"/tmp/.swerl-verify-{uuid.uuid4().hex}"
        staged, _ = await bundle_by_deadline(tests, work, paths, staging.lstrip("/") + "/", limit)
        await sb.put_archive(staged)
        raw = await _run_verify_script(sb, staging, limit, tests is not None, None, paths)
    return raw, stats


async def _run_verify_script(
    sb: Verified, source: str, limit: float, upload_tests: bool, stdin: bytes | None = None, clear: list[str] | None = None
) -> ExecResult:
    """:data:`VERIFY_SCRIPT` with no in-container timeout (it kills all but itself and PID 1
    and bounds the tests itself), waited for ``limit`` + a grace. ``upload_tests``: the bundle
    carries ``tests/`` (``/tests`` is wiped first); False: the image's ``/tests`` is kept."""
    uploads = "upload" if upload_tests else "image"
    return await sb.run(Command(
        script=VERIFY_SCRIPT, args=(source, f"{limit:.3f}", uploads, *(clear or [])), stdin=stdin,
        env=dict(sb.task.config.verifier.env) or None, max_output_bytes=VERIFY_OUTPUT_BYTES,
        wait_s=limit + _VERIFY_GRACE_S,
    ))


async def bundle_by_deadline(
    tests_dir: Path | None, work: _Work, paths: list[str], prefix: str, deadline_s: float
) -> tuple[bytes, WorkProductStats]:
    """:func:`~swerl.sandbox.runtime.workproduct.bundle` in a child process that is killed at
    ``deadline_s``: a check that runs long (an archive made to be slow to check) ends with its
    deadline and leaves nothing running, where a worker thread abandoned at its deadline would go
    on holding a core and a slot of the engine's call pool. The archives cross as files of a
    private temporary folder.

    Raises:
        SandboxTimeout: the check ran past ``deadline_s`` (its process was killed).
        UnreadableWorkProduct: an archive of the work product is malformed or truncated.
    """
    with tempfile.TemporaryDirectory(prefix="swerl-bundle-") as tmp:
        inputs = await asyncio.to_thread(_spill, work, tmp)
        request = json.dumps({"tests": str(tests_dir) if tests_dir is not None else None, "work": inputs,
                              "paths": paths, "prefix": prefix, "out": f"{tmp}/bundle.tar"})
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "swerl.sandbox.runtime.workproduct", request,
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


def _spill(work: _Work, folder: str) -> list[tuple[str, str]]:
    """Each archive of ``work`` as a file of ``folder``: ``(path, rebase)`` pairs."""
    files = []
    for i, (spool, rebase) in enumerate(work):
        path = f"{folder}/work-{i}.tar"
        spool.seek(0)
        with open(path, "wb") as fh:
            shutil.copyfileobj(spool, fh, 1 << 20)
        files.append((path, rebase))
    return files


__all__ = ["Verified", "bundle_by_deadline", "too_large", "verification_mode", "verify"]
