"""Parser of terminus-json replies (Harbor ``terminus-2``, JSON variant): pure text in,
commands out. Mirrors the behaviour of Harbor's ``TerminusJSONPlainParser``: the first
balanced JSON object is read, text around it is a warning, a missing closing brace is
auto-corrected with a warning, missing ``analysis``/``plan``/``commands`` is an error."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

REQUIRED_FIELDS = ("analysis", "plan", "commands")
DEFAULT_DURATION_S = 1.0


@dataclass
class Command:
    """One batch entry: ``keystrokes`` sent verbatim, then wait ``duration_s`` seconds."""

    keystrokes: str
    duration_s: float


@dataclass
class ParsedReply:
    """Result of parsing one reply.

    Attributes:
        commands: commands to run, in order (empty on error).
        task_complete: the reply claims the task is done.
        error: why the reply is unusable ("" when usable).
        warnings: problems that were tolerated.
        analysis, plan: the model's text fields.
    """

    commands: list[Command] = field(default_factory=list)
    task_complete: bool = False
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    analysis: str = ""
    plan: str = ""


def parse_terminus_reply(reply: str) -> ParsedReply:
    """Parse one terminus-json reply (thinking already stripped).

    Tries the reply as is, then with missing closing braces appended (Harbor's auto-fix).
    """
    result = _parse_once(reply)
    if result.error and reply.count("{") > reply.count("}"):
        fixed = _parse_once(reply + "}" * (reply.count("{") - reply.count("}")))
        if not fixed.error:
            fixed.warnings.insert(0, "AUTO-CORRECTED: added missing closing brace - please fix this in future responses")
            return fixed
    return result


def _parse_once(reply: str) -> ParsedReply:
    content, warnings = _extract_json_object(reply)
    if not content:
        return ParsedReply(error="No valid JSON found in response", warnings=warnings)
    try:
        data = json.loads(content)
    except json.JSONDecodeError as err:
        preview = content if len(content) < 200 else content[:100] + "..."
        return ParsedReply(error=f"Invalid JSON: {err} | Content: {preview!r}", warnings=warnings)
    if not isinstance(data, dict):
        return ParsedReply(error="Response must be a JSON object", warnings=warnings)
    missing = [name for name in REQUIRED_FIELDS if name not in data]
    if missing:
        return ParsedReply(error=f"Missing required fields: {', '.join(missing)}", warnings=warnings)
    if not isinstance(data["commands"], list):
        return ParsedReply(error="Field 'commands' must be an array", warnings=warnings)
    task_complete = _as_bool(data.get("task_complete", False))
    commands, error = _parse_commands(data["commands"], warnings)
    if error and not task_complete:
        return ParsedReply(error=error, warnings=warnings)
    if error:
        warnings.append(error)
    return ParsedReply(
        commands=commands,
        task_complete=task_complete,
        warnings=warnings,
        analysis=str(data.get("analysis", "")),
        plan=str(data.get("plan", "")),
    )


def _as_bool(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _parse_commands(items: list, warnings: list[str]) -> tuple[list[Command], str]:
    commands: list[Command] = []
    for i, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            return [], f"Command {i} must be an object"
        if not isinstance(item.get("keystrokes"), str):
            return [], f"Command {i} missing required 'keystrokes' string"
        duration = item.get("duration", None)
        if isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration < 0:
            warnings.append(f"Command {i}: missing or invalid duration, using default {DEFAULT_DURATION_S}")
            duration = DEFAULT_DURATION_S
        if i < len(items) and not item["keystrokes"].endswith("\n"):
            warnings.append(
                f"Command {i} should end with newline when followed by another command. "
                "Otherwise the two commands will be concatenated together on the same line."
            )
        commands.append(Command(keystrokes=item["keystrokes"], duration_s=float(duration)))
    return commands, ""


def _extract_json_object(text: str) -> tuple[str, list[str]]:
    """The first balanced ``{...}`` of ``text`` (strings and escapes respected) and warnings."""
    start, depth, in_string, escaped = -1, 0, False, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
            continue
        if ch == "\\":
            escaped = True
            continue
        if ch == '"':
            in_string = not in_string
            continue
        if in_string:
            continue
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                warnings = []
                if text[:start].strip():
                    warnings.append("Extra text detected before JSON object")
                if text[i + 1:].strip():
                    warnings.append("Extra text detected after JSON object")
                return text[start : i + 1], warnings
    return "", ["No valid JSON object found"]
