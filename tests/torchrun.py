"""Launch a test worker on two CPU ranks with torchrun (gloo), as the distributed tests do. A plain
module (not a conftest), like ``tiny_llama``, so that every test folder imports the same launcher."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_two_ranks(worker: Path, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess:
    """Run ``worker`` with ``args`` on 2 ranks (``torch.distributed.run --standalone``); asserts it
    exited 0 (the assertion shows the tail of its stderr)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(worker), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc
