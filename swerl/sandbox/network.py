"""Which network each phase of a trial gets: what the task asks (task.toml ``network_mode`` per
phase, or schema 1.0's ``allow_internet``) and what the run grants (``--allow-network``).

A container has the whole network (Docker's bridge) or none: ``no-network`` gets none,
``public`` gets the bridge only with ``allow_network``, and an ``allowlist`` cannot be enforced,
so it runs without network unless the run grants network, which is then refused (exit 2)
rather than widened to the whole network. The agent's container gets the agent phase's grant;
the clean room's container the verifier phase's; verified in the agent's container, the tests
keep its network (a ``[verifier] network_mode`` that would need another is refused).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from swerl.errors import TaskError
from swerl.sandbox.runtime.verification import verification_mode
from swerl.sandbox.types import Verification

if TYPE_CHECKING:
    from swerl.sandbox.types import SandboxConfig
    from swerl.tasks.task_folder import Task
    from swerl.tasks.task_toml import PhaseNetwork

log = logging.getLogger(__name__)
Phase = Literal["agent", "verifier"]


def phase_network(task: Task, phase: Phase) -> PhaseNetwork:
    """What ``task`` asks for in ``phase`` (see :meth:`TaskConfig.agent_network`)."""
    return task.config.agent_network() if phase == "agent" else task.config.verifier_network()


def granted(task: Task, phase: Phase, allow_network: bool) -> bool:
    """Whether ``phase`` of ``task`` runs with the bridge network.

    Raises:
        TaskError: (exit 2) the phase asks for an allowlist and the run grants network: swerl
            cannot hold a container to a list of hosts.
    """
    ask = phase_network(task, phase)
    if ask.mode == "allowlist" and allow_network:
        hosts = ", ".join(ask.allowed_hosts) or "no hosts"
        raise TaskError(
            f"{task.path / 'task.toml'}: the {phase} phase asks for network_mode = \"allowlist\" ({hosts}), which swerl "
            "cannot enforce (a sandbox has the whole network or none); run without --allow-network (the phase then "
            "has no network) or leave the task out"
        )
    return allow_network and ask.mode == "public"


def same_container_conflict(task: Task, allow_network: bool) -> str | None:
    """Why ``task`` cannot be verified in the agent's container, or None: a container keeps one
    network, so a ``[verifier] network_mode`` whose grant differs from the agent's cannot hold
    there (Harbor refuses it too on environments that cannot switch networks after start)."""
    if task.config.verifier.network_mode is None:
        return None  # the tests run with the agent's container as it is
    agent, verifier = granted(task, "agent", allow_network), granted(task, "verifier", allow_network)
    if agent == verifier:
        return None
    return (f"{task.path / 'task.toml'}: the verifier phase asks for {'a' if verifier else 'no'} network and the "
            f"agent phase was {'' if agent else 'not '}granted one, but its tests run in the agent's container, which "
            "has one network; verify it in the clean room (declare artifacts, or [verifier] environment_mode = "
            "\"separate\", and do not force verification = \"same_container\"), or give both phases one network_mode")


def network_problem(task: Task, verification: Verification, allow_network: bool) -> str | None:
    """Why ``task`` cannot run with these networks (one line naming task.toml and the fix), or None."""
    try:
        for phase in ("agent", "verifier"):
            granted(task, phase, allow_network)
    except TaskError as err:
        return str(err)
    return same_container_conflict(task, allow_network) if verification == "same_container" else None


def check_network(tasks: Iterable[Task], config: SandboxConfig) -> None:
    """Before a run: refuse every :func:`network_problem`, and say once which task phases ask for
    network they will not get (without ``allow_network``).

    Raises:
        TaskError: (exit 2) the first task whose allowlist the run would have to widen, or whose
            phases need two networks in one container.
    """
    denied = []
    for task in tasks:
        if (problem := network_problem(task, verification_mode(task, config), config.allow_network)) is not None:
            raise TaskError(problem)
        for phase in ("agent", "verifier"):
            if not granted(task, phase, config.allow_network) and phase_network(task, phase).mode != "no-network":
                denied.append(f"{task.name} ({phase})")
    if denied:
        log.warning("%d task phase(s) ask for network and run without it (pass --allow-network, or "
                    "sandbox.allow_network, to grant public network): %s", len(denied),
                    ", ".join(denied[:5]) + (", ..." if len(denied) > 5 else ""))
