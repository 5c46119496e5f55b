"""swerl.sandbox: Docker sandboxes for trials (offline images, isolated containers, exec with
in-container timeouts, persistent shells, the verifier protocol, leak-free lifecycle).

Layout: ``deployment/`` owns engines, images, warm pools, placement and gc; ``runtime/`` owns
one sandbox (commands over one channel interface, files, shell, verifier); ``manager.py``
joins them (docs/sandbox.md, Package layout).

Public API::

    async with SandboxManager(SandboxConfig(engines=[EngineConfig(url=...), ...])) as mgr:
        async with mgr.sandbox(task) as sb:
            await sb.exec("cmd", timeout_s=10.0)
            shell = await sb.open_shell()
            verdict = await sb.verify()
"""

from swerl.sandbox.deployment.config import EngineConfig, EngineTLS
from swerl.sandbox.deployment.engine import EngineLost
from swerl.sandbox.manager import SandboxManager, new_run_id, outcome_of
from swerl.sandbox.types import (
    ExecResult,
    FailureClass,
    Outcome,
    SandboxConfig,
    TrialRecord,
    TrialTimings,
    VerifierResult,
)
from swerl.sandbox.runtime.sandbox import Sandbox
from swerl.sandbox.runtime.shell import Shell

__all__ = [
    "EngineConfig",
    "EngineLost",
    "EngineTLS",
    "ExecResult",
    "FailureClass",
    "Outcome",
    "Sandbox",
    "SandboxConfig",
    "SandboxManager",
    "Shell",
    "TrialRecord",
    "TrialTimings",
    "VerifierResult",
    "new_run_id",
    "outcome_of",
]
