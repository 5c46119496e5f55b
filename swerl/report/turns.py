"""An episode's transcript as turns a person reads: the model's text, the commands it ran and
what they printed, parsed with the parser of the run's agent protocol.

Stage: after the agent; reads message lists only. Each protocol's reader is the function the
protocol itself acts with (``parse_terminus_reply``, ``parse_tool_calls``,
``extract_python_block``), so the viewer shows exactly the commands the sandbox received.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Turn:
    """One assistant reply and what followed it.

    Attributes: text: the model's words (analysis and plan, or the reply without its commands).
        commands: what the sandbox ran (keystrokes, bash commands, or the solution file written).
        outputs: the observations that came back (terminal screens, tool results), in order.
        error: why the reply could not be parsed ("" when it could).
    """

    text: str
    commands: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    error: str = ""


def _content(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, indent=1)


def _terminus(reply: str) -> Turn:
    from swerl.agent.protocols.terminus_parser import parse_terminus_reply

    parsed = parse_terminus_reply(reply)
    if parsed.error:
        return Turn(reply, error=parsed.error)
    text = "\n\n".join(str(part) for part in (parsed.analysis, parsed.plan) if part)
    commands = [c.keystrokes for c in parsed.commands] + (["(declares the task complete)"] if parsed.task_complete else [])
    return Turn(text, commands)


def _tool_call(reply: str) -> Turn:
    from swerl.agent.protocols.base import strip_thinking
    from swerl.agent.protocols.tool_call import parse_tool_calls

    commands, error = parse_tool_calls(reply)
    text = strip_thinking(reply).split("<tool_call>", 1)[0].strip()
    return Turn(text or reply if error else text, commands, error=error)


def _single_turn(reply: str) -> Turn:
    from swerl.agent.protocols.single_turn import extract_python_block

    code = extract_python_block(reply)
    if code is None:
        return Turn(reply, error="no fenced code block: nothing was written")
    text = reply.replace(code, "").replace("```python", "").replace("```py", "").replace("```", "").strip()
    return Turn(text, [f"# written to the solution file\n{code}"])


READERS: dict[str, Callable[[str], Turn]] = {
    "terminus-json": _terminus, "terminus-json-fast": _terminus, "tool-call": _tool_call, "single-turn": _single_turn,
}
"""The reply reader of each ``agent.protocol``."""


def split_turns(messages: list[dict[str, Any]], protocol: str | None) -> tuple[str, list[Turn]]:
    """(the task prompt, the turns) of a transcript.

    Args: messages: ``{"role", "content"}`` dicts (system, user, assistant, tool; a transcript
        decoded from ids has ``prompt``/``observation`` roles). protocol: the run's
        ``agent.protocol``; None or unknown: replies are shown whole, without commands.
    Returns: the text before the first reply (system + first user message), and one Turn per
        assistant reply with the messages after it as its outputs.
    """
    read = READERS.get(protocol or "", lambda reply: Turn(reply))
    prompt: list[str] = []
    turns: list[Turn] = []
    for message in messages:
        role, text = str(message.get("role", "")), _content(message)
        if role == "assistant":
            turns.append(read(text))
        elif turns:
            turns[-1].outputs.append(text)
        else:
            prompt.append(f"[{role}] {text}")
    return "\n\n".join(prompt), turns


def turns_json(messages: list[dict[str, Any]], protocol: str | None) -> dict[str, Any]:
    """:func:`split_turns` as plain data for the HTML viewer."""
    prompt, turns = split_turns(messages, protocol)
    return {"prompt": prompt, "turns": [asdict(t) for t in turns]}
