"""swerl.agent: agent episodes in sandboxes (terminus-json, tool-call, single-turn),
token-in/token-out trajectories, rollout collection and evaluation.

Public API::

    from swerl.agent import AgentConfig, BackendPolicy, collect_rollouts, run_episode

    trajectories = await collect_rollouts(tasks, n_samples, policy, sandbox_manager, agent_cfg,
                                          concurrency=8, on_event=callback)
"""

from swerl.agent.config import AgentConfig, EpisodeLimits
from swerl.agent.episode import run_episode
from swerl.agent.metrics import pass_at_k, summarize
from swerl.agent.policy import BackendPolicy, Policy, ScriptedPolicy
from swerl.agent.collect import RolloutEvent, collect_rollouts
from swerl.agent.trajectory import Trajectory

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
