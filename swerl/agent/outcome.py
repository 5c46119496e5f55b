"""How an episode's end reason and the verifier's verdict become the trajectory's
outcome, reward and failure class.

- ``sandbox_error``: ``mask`` (infrastructure, not the agent's choice): reward 0, no
  trainable tokens, excluded from the RLOO baseline.
- ``context_overflow``: ``mask`` by default; ``on_context_full: zero`` gives reward 0 kept
  in the baseline (terminus-2 with summarization off).
- ``agent_timeout`` and ``parse_failures``: ``zero`` by default (reward 0, kept in the
  baseline); ``passthrough`` uses the verifier's reward instead.
- anything else: the verifier's outcome, reward and class (``no_reward_file`` and
  ``bad_reward`` are ``mask``, ``verifier_timeout`` is ``zero``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swerl.agent.config import AgentConfig
from swerl.agent.trajectory import FailureClass


@dataclass(frozen=True)
class Verdict:
    """Outcome name, reward in [0, 1] and failure class of one trajectory."""

    outcome: str
    reward: float
    failure_class: FailureClass


def judge(end_reason: str, verifier: Any | None, cfg: AgentConfig, sandbox_outcome: str | None = None) -> Verdict:
    """Combine the end reason with the verifier result (None when verification did not run).

    Args:
        end_reason: why the agent stopped (``EndReason``).
        verifier: a ``VerifierResult`` (outcome, reward, failure_class) or None.
        cfg: agent config (``on_agent_timeout``, ``on_parse_failures``).
        sandbox_outcome: the ``SandboxError.outcome`` when the sandbox failed.
    """
    if end_reason == "sandbox_error" or verifier is None:
        return Verdict(sandbox_outcome or "sandbox_error", 0.0, FailureClass.mask)
    if end_reason == "context_overflow":
        overflow = FailureClass.mask if cfg.on_context_full == "mask" else FailureClass.zero
        return Verdict("context_overflow", 0.0, overflow)
    if end_reason == "agent_timeout" and cfg.on_agent_timeout == "zero":
        return Verdict("agent_timeout", 0.0, FailureClass.zero)
    if end_reason == "parse_failures" and cfg.on_parse_failures == "zero":
        return Verdict("parse_failures", 0.0, FailureClass.zero)
    outcome = getattr(verifier.outcome, "value", verifier.outcome)
    return Verdict(str(outcome), float(verifier.reward), verifier.failure_class)
