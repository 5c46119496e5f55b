"""Run one command in a container with a timeout that kills it *inside* the container,
and move files in and out as tar streams.

The command runs as the exec's own process ``timeout -s KILL T bash -c CMD`` (``timeout``
puts itself in a new process group and kills the whole group when T runs out). If the
output stream still does not end (a daemonized grandchild holds it open), swerl kills every
process carrying the exec's ``SWERL_EXEC`` environment marker and stops reading.
"""

from __future__ import annotations

import asyncio
import io
import logging
import tarfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from swerl.errors import SandboxError
from swerl.sandbox.types import ExecResult
from swerl.sandbox.runtime.streams import CappedOutput, open_exec_stream, read_frames

if TYPE_CHECKING:
    import docker

    from swerl.sandbox.docker_api import DockerCaller

log = logging.getLogger(__name__)

MARKER_ENV = "SWERL_EXEC"
# $1: marker value. Kills every process whose environment carries SWERL_EXEC=$1.
_KILLER = (
    'for e in /proc/[0-9]*/environ; do grep -qz "^SWERL_EXEC=$1\\$" "$e" 2>/dev/null || continue; '
    'p=${e#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null; done; true'
)
# Seconds allowed past the command's timeout before swerl kills from outside and stops reading.
STREAM_GRACE_S = 5.0


async def exec_command(
    call: DockerCaller,
    client: docker.DockerClient,
    container_id: str,
    command: str,
    timeout_s: float,
    max_output_bytes: int,
    env: dict[str, str] | None = None,
    workdir: str | None = None,
    stdin: bytes | None = None,
) -> ExecResult:
    """Run ``bash -c command`` in the container and wait for it, at most ``timeout_s`` seconds.

    ``stdin`` (bytes), when given, is the command's standard input (then EOF).

    Returns:
        ExecResult with output (stdout+stderr, capped to ``max_output_bytes``) and
        ``timed_out=True``/``exit_code=None`` when the timeout killed the command.

    Raises:
        SandboxError: the container is gone or the daemon failed (``outcome`` daemon_error).
    """
    marker = uuid.uuid4().hex
    argv = ["timeout", "-s", "KILL", _fmt_seconds(timeout_s), "bash", "-c", command]
    env = {**(env or {}), MARKER_ENV: marker}
    raw = await exec_argv(
        call, client, container_id, argv, timeout_s + STREAM_GRACE_S, max_output_bytes, env, workdir, stdin
    )
    timed_out = killed_by_timeout(raw, timeout_s)
    if timed_out:  # also get what left the process group (setsid, daemons) of a timed-out command
        await kill_exec(call, client, container_id, marker)
    if raw.exit_code is None and not timed_out:
        log.warning("exec in %s ended without an exit code", container_id[:12])
    return ExecResult(
        exit_code=None if timed_out else raw.exit_code,
        output=raw.output,
        timed_out=timed_out,
        duration_s=raw.duration_s,
        truncated_bytes=raw.truncated_bytes,
    )


async def exec_argv(
    call: DockerCaller, client: docker.DockerClient, container_id: str, argv: list[str], deadline_s: float,
    max_output_bytes: int, env: dict[str, str] | None = None, workdir: str | None = None, stdin: bytes | None = None,
) -> ExecResult:
    """Run ``argv`` as-is and read its output for at most ``deadline_s`` seconds.

    ``stdin`` (bytes) is written to the process's standard input, followed by EOF; this is
    how files travel with a command in one round trip (``tar -x`` reading stdin).

    Returns:
        ExecResult; ``exit_code`` None and ``timed_out`` True when the stream outlived the
        deadline (the process is *not* killed here; callers own that).

    Raises:
        SandboxError: the container is gone or the daemon failed.
    """
    api = client.api
    start = time.monotonic()
    created = await call(
        api.exec_create, container_id, argv, stdout=True, stderr=True, stdin=stdin is not None,
        environment=env, workdir=workdir,
    )
    exec_id = created["Id"]
    reader, writer = await open_exec_stream(call.endpoint, exec_id, False, call.default_timeout_s)
    sink = CappedOutput(max_output_bytes)
    stream_done = True
    try:
        feeding = asyncio.gather(read_frames(reader, sink), _feed(writer, stdin))
        await asyncio.wait_for(feeding, max(deadline_s - (time.monotonic() - start), 0.1))
    except asyncio.TimeoutError:
        stream_done = False
    finally:
        writer.close()
    exit_code = await _exit_code(call, client, exec_id) if stream_done else None
    return ExecResult(
        exit_code=exit_code,
        output=sink.text(),
        timed_out=not stream_done,
        duration_s=time.monotonic() - start,
        truncated_bytes=sink.dropped,
    )


async def _feed(writer: asyncio.StreamWriter, data: bytes | None) -> None:
    if data is None:
        return
    try:
        writer.write(data)
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError as err:  # the process exited without reading everything
        log.debug("stdin of exec not fully written: %s", err)


async def kill_exec(call: DockerCaller, client: docker.DockerClient, container_id: str, marker: str) -> None:
    """Kill every process of the exec tagged ``SWERL_EXEC=marker`` inside the container (best effort)."""
    try:
        await call(_run_detached, client, container_id, ["/bin/sh", "-c", _KILLER, "swerl-kill", marker])
    except SandboxError as err:
        log.debug("kill of exec %s in %s failed: %s", marker, container_id[:12], err)


def _run_detached(client: docker.DockerClient, container_id: str, argv: list[str]) -> None:
    exec_id = client.api.exec_create(container_id, argv)["Id"]
    client.api.exec_start(exec_id)


async def _exit_code(call: DockerCaller, client: docker.DockerClient, exec_id: str) -> int | None:
    # The stream can end a moment before the daemon records the exit code.
    for _ in range(50):
        info = await call(client.api.exec_inspect, exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        await asyncio.sleep(0.01)
    return None


def killed_by_timeout(result: ExecResult, timeout_s: float) -> bool:
    """The timeout rule, for every command path (docker exec and the keeper): a command was
    killed by its timeout when the stream outlived the deadline, or when it ended with 137
    (``timeout -s KILL`` kills its own process group too) or 124 at the deadline (within 50 ms)."""
    return result.timed_out or (result.exit_code in (124, 137) and result.duration_s >= timeout_s - 0.05)


def _fmt_seconds(seconds: float) -> str:
    return f"{max(seconds, 0.001):.3f}"


# --- tar streams --------------------------------------------------------------


def tar_of_files(files: dict[str, tuple[bytes, int]]) -> bytes:
    """A tar archive (bytes) holding ``{absolute_path: (data, mode)}``, to be extracted at
    ``/`` (the daemon creates missing parent directories, mode 0755)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, (data, mode) in files.items():
            rel = path.lstrip("/")
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_of_dir(local_dir: Path, dest: str) -> bytes:
    """A tar archive (bytes) of ``local_dir``'s contents placed under ``dest`` (absolute),
    to be extracted at ``/``. Symlinks are stored as links, never followed."""
    buf = io.BytesIO()
    rel_dest = dest.strip("/")
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for item in sorted(local_dir.rglob("*")):
            arcname = f"{rel_dest}/{item.relative_to(local_dir).as_posix()}".lstrip("/")
            tar.add(item, arcname=arcname, recursive=False, filter=_root_owned)
    return buf.getvalue()


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # Containers run without CAP_CHOWN: files must arrive owned by root, whoever owns them here.
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


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
