"""How an episode's end reason and the verifier's verdict become the trajectory's
outcome, reward and failure class.

- no verdict (verification failed: the container, the copy-out, the disk budget), or a verdict
  without a trustworthy reward (``no_reward_file``, ``bad_reward``, ...): class ``mask`` with
  ``needs_control``: the collector runs a control (:mod:`swerl.sandbox.control`), which turns it
  into ``zero`` when the control reads a reward and leaves it ``mask`` only when the control fails too.
- ``context_overflow``: the verifier's verdict by default (``on_context_full: passthrough``: the
  work product is scored as it stands); ``zero`` gives reward 0 kept in the baseline, ``mask``
  (an explicit choice; a policy can then escape its penalty by filling its context) masks it.
- ``agent_timeout`` and ``parse_failures``: ``zero`` by default (reward 0, kept in the
  baseline); ``passthrough`` uses the verifier's reward instead.
- anything else (a shell the agent ended included: ``completed``): the verifier's outcome,
  reward and class (``verifier_timeout`` and ``oom`` are ``zero``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swerl.agent.config import AgentConfig
from swerl.agent.trajectory import FailureClass


@dataclass(frozen=True)
class Verdict:
    """Outcome name, reward in [0, 1] and failure class of one trajectory; ``needs_control``: a
    ``mask`` that stands only if a control run fails too."""

    outcome: str
    reward: float
    failure_class: FailureClass
    needs_control: bool = False


def judge(end_reason: str, verifier: Any | None, cfg: AgentConfig, sandbox_outcome: str | None = None) -> Verdict:
    """Combine the end reason with the verifier result (None when verification failed).

    Args:
        end_reason: why the agent stopped (``EndReason``).
        verifier: a ``VerifierResult`` (outcome, reward, failure_class) or None.
        cfg: agent config (``on_agent_timeout``, ``on_parse_failures``, ``on_context_full``).
        sandbox_outcome: the ``SandboxError.outcome`` that failed verification (or the episode).
    """
    if verifier is None:
        return Verdict(sandbox_outcome or "sandbox_error", 0.0, FailureClass.mask, needs_control=True)
    if end_reason == "context_overflow" and cfg.on_context_full != "passthrough":
        overflow = FailureClass.mask if cfg.on_context_full == "mask" else FailureClass.zero
        return Verdict("context_overflow", 0.0, overflow)
    if end_reason == "agent_timeout" and cfg.on_agent_timeout == "zero":
        return Verdict("agent_timeout", 0.0, FailureClass.zero)
    if end_reason == "parse_failures" and cfg.on_parse_failures == "zero":
        return Verdict("parse_failures", 0.0, FailureClass.zero)
    outcome = getattr(verifier.outcome, "value", verifier.outcome)
    failure_class = verifier.failure_class
    return Verdict(str(outcome), float(verifier.reward), failure_class, needs_control=failure_class == FailureClass.mask)
