"""The tamper signal of an episode, and what a flagged episode does to training.

Two halves: the container's (what the agent's container held at verification, judged by the
sandbox before the tests ran: ``VerifierResult.tamper``) and the commands' (every text the
protocol sent into the sandbox: tool calls, keystrokes, the single-turn solution), judged by
the same text rules (:mod:`swerl.sandbox.tamper.text`). ``AgentConfig.on_tamper`` decides:
``record`` keeps the verdict, ``zero`` turns a flagged episode into reward 0, class ``zero``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swerl.agent.config import AgentConfig
from swerl.agent.outcome import Verdict
from swerl.agent.trajectory import FailureClass, Trajectory
from swerl.sandbox.tamper.scan import merge
from swerl.sandbox.tamper.text import texts_reasons

TAMPER_OUTCOME = "tamper"


def episode_tamper(actions: Sequence[str], container: Sequence[str]) -> list[str]:
    """The episode's reasons: the container's (its scan's, ``VerifierResult.tamper``, or those a
    failed verification carries, ``SandboxError.tamper``; none when the scan did not run), then
    those of the agent's actions (``"family: an action ..."``), each once, capped."""
    sent = texts_reasons((text, "an action") for text in actions)
    return merge(list(container), sent)


def on_tamper(verdict: Verdict, reasons: Sequence[str], cfg: AgentConfig) -> Verdict:
    """``verdict`` under ``cfg.on_tamper``: unchanged when there are no reasons or the policy is
    ``record``; else reward 0, class ``zero`` (kept in the baseline, trained on), outcome ``tamper``."""
    if not reasons or cfg.on_tamper == "record":
        return verdict
    return Verdict(TAMPER_OUTCOME, 0.0, FailureClass.zero)


def with_tamper(traj: Trajectory, reasons: Sequence[str]) -> Trajectory:
    """``traj`` carrying its tamper ``reasons``; a zeroed one says why in ``detail``."""
    update: dict[str, Any] = {"tamper": list(reasons)}
    if traj.outcome == TAMPER_OUTCOME and reasons:
        update["detail"] = f"zeroed (on_tamper: zero): {reasons[0]}" + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else "")
    return traj.model_copy(update=update)
