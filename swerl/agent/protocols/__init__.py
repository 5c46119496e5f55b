"""Agent protocols: terminus-json (Harbor's terminus-2), terminus-json-fast, tool-call, single-turn."""

from __future__ import annotations

from swerl.agent.config import AgentConfig
from swerl.agent.protocols.base import AgentProtocol, EndReason, TurnResult, limit_output_bytes, strip_thinking
from swerl.agent.protocols.single_turn import SingleTurn
from swerl.agent.protocols.terminus2 import Terminus2
from swerl.agent.protocols.terminus_json import TerminusJson
from swerl.agent.protocols.tool_call import ToolCall


def make_protocol(cfg: AgentConfig, template_has_tools: bool) -> AgentProtocol:
    """A fresh protocol state machine for one episode (``cfg.protocol`` picks the class)."""
    if cfg.protocol == "terminus-json":
        return Terminus2(cfg)
    if cfg.protocol == "terminus-json-fast":
        return TerminusJson(cfg)
    if cfg.protocol == "tool-call":
        return ToolCall(cfg, template_has_tools=template_has_tools)
    return SingleTurn(cfg)


__all__ = [
    "AgentProtocol",
    "EndReason",
    "SingleTurn",
    "Terminus2",
    "TerminusJson",
    "ToolCall",
    "TurnResult",
    "limit_output_bytes",
    "make_protocol",
    "strip_thinking",
]
