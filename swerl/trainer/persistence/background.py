"""Writes that finish in the background (``checkpointing.async_save``): a checkpoint or an HF
export is started at its step, a thread writes its bytes under the ``.tmp-*`` name while training
goes on, and it is committed (renamed into place) only once its bytes are on disk.

Writes are committed in the order they started, so the step commit protocol
(``commit.py``) holds: the export of step N is visible before the checkpoint of step N, and the
checkpoint's rename stays the commit point. A write is finished (waited for, then committed)
before the next write of its kind starts, at the end of training, and when a signal or an error
stops the run. A crash or ``kill -9`` before that leaves only the ``.tmp-*`` folder, which the
next save or resume removes: the previous committed checkpoint is the one a resume loads.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal, Protocol

log = logging.getLogger(__name__)

WriteKind = Literal["checkpoint", "export"]


class PendingWrite(Protocol):
    """A write started at ``step``; :meth:`finish` waits for this rank's bytes, then rank 0 commits it."""

    kind: WriteKind
    step: int

    def finish(self) -> Path:
        """Block until the write is on disk, commit it (rank 0), return the final folder. Calling
        it again after a success returns at once. Raises what the write raised (left uncommitted)."""
        ...


def resolve_async_save(setting: bool | Literal["auto"], device_type: str) -> bool:
    """Whether checkpoints (and full HF exports) are written in the background.

    Args:
        setting: ``checkpointing.async_save``: True, False or ``auto``.
        device_type: the trainer's device, ``cuda`` or ``cpu`` (``DistInfo.device.type``).
    Returns: ``setting`` when it is a bool; for ``auto`` True on CUDA (the background write's
        staging copies each rank's GPU shards to host memory once, and the GPUs go on training),
        False elsewhere (on CPU the staged state is a second copy of the whole state in the same
        RAM, and the write thread takes cores from the trainer and the sandboxes).
    """
    if setting == "auto":
        return device_type == "cuda"
    return bool(setting)


class BackgroundWrites:
    """The writes started and not yet committed, oldest first."""

    def __init__(self) -> None:
        self._queue: list[PendingWrite] = []

    def add(self, write: PendingWrite) -> None:
        """Queue ``write`` (started) to be committed after every write queued before it."""
        self._queue.append(write)

    def pending(self) -> list[tuple[WriteKind, int]]:
        """(kind, step) of each uncommitted write, oldest first."""
        return [(w.kind, w.step) for w in self._queue]

    def finish(self, kind: WriteKind | None = None) -> list[Path]:
        """Commit every write up to the newest one of ``kind`` (None: all of them), oldest first.

        Returns: the committed folders. Raises what a write raised; that write and the ones after
        it stay queued (uncommitted).
        """
        kinds = [w.kind for w in self._queue]
        last = len(kinds) if kind is None else (len(kinds) - kinds[::-1].index(kind) if kind in kinds else 0)
        done = []
        while len(done) < last:
            done.append(self._queue[0].finish())
            self._queue.pop(0)
        return done

    def finish_on_exit(self) -> None:
        """:meth:`finish` all, for a run that an exception or a signal is ending: a write that fails
        is logged (it stays a ``.tmp-*`` folder, the resume loads the checkpoint before it), never
        raised over the exception that ends the run."""
        try:
            self.finish()
        except KeyboardInterrupt:  # a second signal: stop at once
            raise
        except BaseException as err:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
            kind, step = self.pending()[0]
            log.warning("the %s of step %d was not committed (%s: %s): a resume starts from the checkpoint "
                        "before it", kind, step, type(err).__name__, err)
            self._queue.clear()
