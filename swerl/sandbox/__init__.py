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

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swerl.sandbox.engine_config import EngineConfig, EngineTLS
    from swerl.sandbox.deployment.engine import EngineLost
    from swerl.sandbox.manager import SandboxManager, new_run_id, outcome_of
    from swerl.sandbox.runtime.sandbox import Sandbox
    from swerl.sandbox.runtime.shell import Shell
    from swerl.sandbox.types import (
        ExecResult,
        FailureClass,
        Outcome,
        SandboxConfig,
        TrialRecord,
        TrialTimings,
        VerifierResult,
    )

# Imported on first use (PEP 562): `swerl.sandbox.types` (read by every config) then loads
# without the Docker SDK, so a config error answers at once.
_HOME = {
    "EngineConfig": "engine_config", "EngineTLS": "engine_config", "EngineLost": "deployment.engine",
    "SandboxManager": "manager", "new_run_id": "manager", "outcome_of": "manager", "Sandbox": "runtime.sandbox",
    "Shell": "runtime.shell", **{name: "types" for name in (
        "ExecResult", "FailureClass", "Outcome", "SandboxConfig", "TrialRecord", "TrialTimings", "VerifierResult")},
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'swerl.sandbox' has no attribute {name!r}")
    return getattr(import_module(f"swerl.sandbox.{_HOME[name]}"), name)


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
