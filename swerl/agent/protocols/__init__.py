"""Agent protocols (``shared/spec/tasks.md`` §5): terminus-json, tool-call, single-turn."""

from __future__ import annotations

from swerl.agent.config import AgentConfig
from swerl.agent.protocols.base import AgentProtocol, EndReason, TurnResult, limit_output_bytes, strip_thinking
from swerl.agent.protocols.single_turn import SingleTurn
from swerl.agent.protocols.terminus_json import TerminusJson
from swerl.agent.protocols.tool_call import ToolCall


def make_protocol(cfg: AgentConfig, template_has_tools: bool) -> AgentProtocol:
    """A fresh protocol state machine for one episode (``cfg.protocol`` picks the class)."""
    if cfg.protocol == "terminus-json":
        return TerminusJson(cfg)
    if cfg.protocol == "tool-call":
        return ToolCall(cfg, template_has_tools=template_has_tools)
    return SingleTurn(cfg)


__all__ = [
    "AgentProtocol",
    "EndReason",
    "SingleTurn",
    "TerminusJson",
    "ToolCall",
    "TurnResult",
    "limit_output_bytes",
    "make_protocol",
    "strip_thinking",
]
