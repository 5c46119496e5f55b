"""swerl.agent: agent episodes in sandboxes (terminus-json, tool-call, single-turn),
token-in/token-out trajectories, rollout collection and evaluation.

Public API::

    from swerl.agent import AgentConfig, BackendPolicy, collect_rollouts, run_episode

    trajectories = await collect_rollouts(tasks, n_samples, policy, sandbox_manager, agent_cfg,
                                          concurrency=8, on_event=callback)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swerl.agent.collect import RolloutEvent, collect_rollouts
    from swerl.agent.config import AgentConfig, EpisodeLimits
    from swerl.agent.episode import run_episode
    from swerl.agent.metrics import pass_at_k, summarize
    from swerl.agent.policy import BackendPolicy, Policy, ScriptedPolicy
    from swerl.agent.trajectory import Trajectory

# Imported on first use (PEP 562): `swerl.agent.config` (read by every config) then loads
# without the episode code and the Docker SDK behind it, so a config error answers at once.
_HOME = {
    "AgentConfig": "config", "EpisodeLimits": "config", "run_episode": "episode", "pass_at_k": "metrics",
    "summarize": "metrics", "BackendPolicy": "policy", "Policy": "policy", "ScriptedPolicy": "policy",
    "RolloutEvent": "collect", "collect_rollouts": "collect", "Trajectory": "trajectory",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'swerl.agent' has no attribute {name!r}")
    return getattr(import_module(f"swerl.agent.{_HOME[name]}"), name)


__all__ = [
    "AgentConfig",
    "BackendPolicy",
    "EpisodeLimits",
    "Policy",
    "RolloutEvent",
    "ScriptedPolicy",
    "Trajectory",
    "collect_rollouts",
    "pass_at_k",
    "run_episode",
    "summarize",
]
