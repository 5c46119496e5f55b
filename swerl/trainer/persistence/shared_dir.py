"""The run directory must be one folder for every rank: each rank writes its DCP shards of a
checkpoint there and rank 0 renames the folder once all are written (``checkpoint.py``); a
directory local to each node strands the shards and the resume fails. Checked once, at start.
"""

from __future__ import annotations

import secrets
import socket
import time
from pathlib import Path

from swerl.errors import ConfigError
from swerl.trainer.distributed import DistInfo, all_gather_objects, barrier, broadcast_object, is_distributed


def check_shared_run_dir(run_dir: Path, dist_info: DistInfo, wait_s: float = 10.0) -> None:
    """Every rank must see the files rank 0 writes under ``run_dir`` (DCP shards of all ranks make
    one checkpoint; a folder local to each node strands them and resume fails). Rank 0 writes a
    marker with a fresh name, every rank looks for it (up to ``wait_s`` seconds, for file systems
    that show new files late), rank 0 removes it. Every rank calls it, after rank 0 made ``run_dir``.

    Raises: ConfigError on every rank, naming the ranks and hosts that do not see rank 0's file.
    """
    if not is_distributed():
        return
    marker = run_dir / f".swerl-shared-{broadcast_object(secrets.token_hex(8) if dist_info.is_main else None)}"
    if dist_info.is_main:
        marker.write_text(socket.gethostname())
    barrier()
    deadline = time.monotonic() + wait_s
    while not marker.is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    seen = all_gather_objects((marker.is_file(), socket.gethostname()))
    if dist_info.is_main:
        marker.unlink(missing_ok=True)
    barrier()  # the marker is gone before any rank goes on
    blind = [f"rank {rank} on {host}" for rank, (ok, host) in enumerate(seen) if not ok]
    if blind:
        raise ConfigError(
            f"run directory {run_dir} is not shared by every rank: {', '.join(blind)} cannot see the files rank 0 "
            f"writes on {seen[0][1]}; checkpoints would be split across nodes: put --run-dir on a file system every "
            "node mounts (NFS, Lustre, a shared volume)")
