"""The interface every agent protocol implements, and the text helpers they share.

A protocol is a small state machine: it builds the first messages of an episode from the
task, then turns each assistant reply into actions in the sandbox and the observation
messages of the next turn, or an end reason. Token bookkeeping is not its business
(see ``swerl.agent.tokens``).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

from swerl.agent.config import AgentConfig

if TYPE_CHECKING:
    from swerl.sandbox.runtime.sandbox import Sandbox

EndReason = Literal[
    "task_complete",
    "completed",
    "max_turns",
    "context_overflow",
    "agent_timeout",
    "parse_failures",
    "sandbox_error",
]


@dataclass
class TurnResult:
    """What one assistant reply led to.

    Attributes:
        observation: user/tool messages to show next (empty when the episode ends).
        end_reason: set when the episode ends after this reply.
        parse_failed: the reply could not be parsed (counted in ``parse_failures``).
    """

    observation: list[dict] = field(default_factory=list)
    end_reason: EndReason | None = None
    parse_failed: bool = False


class AgentProtocol(ABC):
    """One way of talking to the model (docs/tasks.md, Agent protocols)."""

    name: ClassVar[str]
    stop_strings: ClassVar[tuple[str, ...]] = ()
    """Stop strings of every turn. Only for protocols whose episode ends after that turn:
    a multi-turn protocol must end turns on stop token ids (text stops break token-out)."""
    supports_summarization: ClassVar[bool] = False
    """Whether ``on_context_full: summarize`` applies (terminus-2 only)."""

    def __init__(self, cfg: AgentConfig):
        self.cfg = cfg
        self.prefill = ""
        """Text the first assistant turn starts with, set by :meth:`initial_messages`; the
        episode appends its ids to the prompt ids and prepends it to the first reply."""
        self.actions: list[str] = []
        """Every text this protocol sent into the sandbox for the policy, in order (commands,
        keystrokes, file contents); the episode's tamper signal reads it."""

    def tools(self) -> list[dict] | None:
        """JSON-schema tools handed to the chat template, or None."""
        return None

    @abstractmethod
    def initial_messages(self, instruction: str) -> list[dict]:
        """The chat messages of the first prompt for a task ``instruction``."""

    async def start(self, sandbox: Sandbox) -> None:
        """Prepare the sandbox side (e.g. open the persistent shell). Default: nothing."""

    def messages_after_start(self) -> list[dict] | None:
        """First messages rebuilt once :meth:`start` has seen the sandbox (e.g. the real first
        screen), or None to keep :meth:`initial_messages`. Nothing has been generated yet,
        so the episode simply re-renders its prompt ids."""
        return None

    async def act_truncated(self, reply: str, sandbox: Sandbox, max_new_tokens: int) -> TurnResult | None:
        """What a reply cut at the per-turn limit of ``max_new_tokens`` tokens leads to, or
        None to :meth:`act` on it like any reply (the default)."""
        return None

    @abstractmethod
    async def act(self, reply: str, sandbox: Sandbox) -> TurnResult:
        """Carry out one assistant ``reply`` (text, thinking included) in ``sandbox``."""


_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)


def strip_thinking(reply: str) -> str:
    """The reply without Qwen3 ``<think>...</think>`` blocks (an unclosed one swallows the rest)."""
    text = _THINK_RE.sub("", reply)
    open_at = text.find("<think>")
    return text[:open_at] if open_at >= 0 else text


def limit_output_bytes(output: str, max_bytes: int) -> str:
    """Keep the first and last ``max_bytes // 2`` UTF-8 bytes of ``output``, eliding the middle.

    Same rule and marker as Harbor terminus-2 ``_limit_output_length``; split characters
    are dropped, never replaced. Returns ``output`` unchanged when it fits.
    """
    raw = output.encode("utf-8")
    if len(raw) <= max_bytes:
        return output
    half = max_bytes // 2
    head = raw[:half].decode("utf-8", errors="ignore")
    tail = raw[-half:].decode("utf-8", errors="ignore")
    omitted = len(raw) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return f"{head}\n[... output limited to {max_bytes} bytes; {omitted} interior bytes omitted ...]\n{tail}"


def at_parse_failure_cap(num_in_a_row: int, cap: int | None) -> bool:
    """Whether ``num_in_a_row`` unparsable replies end the episode (``cap`` None: never, as terminus-2)."""
    return cap is not None and num_in_a_row >= cap
