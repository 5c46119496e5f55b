"""Parser of terminus-json replies: pure text in, commands, errors and warnings out.

Reproduces Harbor's ``TerminusJSONPlainParser`` (``terminus_json_plain_parser.py``,
harbor-framework/main 2026-05-02) message for message:

- the first balanced ``{...}`` is read (quotes and backslashes respected; a stray ``}``
  before it drives the depth negative, as upstream); text around it is a warning;
- missing ``analysis``/``plan``/``commands``, a non-object, a non-array ``commands`` or a bad
  command are errors; non-string ``analysis``/``plan``, fields out of order, a non-boolean
  ``task_complete``, a missing or non-numeric ``duration``, unknown command fields and a
  missing newline between commands are warnings;
- on an error two auto-fixes are tried in order: append the missing closing braces, then
  take the first parsable ``{...}`` (one nesting level) out of mixed content; a fix that
  parses cleanly is used with an ``AUTO-CORRECTED: ...`` warning in front;
- a command error in a reply that claims ``task_complete`` is only a warning.

One deliberate difference: several unknown fields of one command are listed in the order
they appear (upstream joins a ``set``, whose order changes from process to process).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

REQUIRED_FIELDS = ("analysis", "plan", "commands")
DEFAULT_DURATION_S = 1.0
_MIXED_CONTENT_RE = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", re.DOTALL)
_FIXES = (
    "Fixed incomplete JSON by adding missing closing brace",
    "Extracted JSON from mixed content",
)


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
        warnings: problems that were tolerated, in upstream order.
        analysis, plan: the model's text fields ("" when absent).
    """

    commands: list[Command] = field(default_factory=list)
    task_complete: bool = False
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    analysis: object = ""
    plan: object = ""

    @property
    def warning_text(self) -> str:
        """The warnings as terminus-2 prints them: ``- a\\n- b`` ("" when none)."""
        return "- " + "\n- ".join(self.warnings) if self.warnings else ""


def parse_terminus_reply(reply: str) -> ParsedReply:
    """Parse one terminus-json reply; on an error try the two auto-fixes in order."""
    result = _parse_once(reply)
    if not result.error:
        return result
    for name, fix in zip(_FIXES, (_fix_incomplete_json, _fix_mixed_content)):
        fixed = fix(reply, result.error)
        if fixed is None:
            continue
        corrected = _parse_once(fixed)
        if not corrected.error:
            corrected.warnings.insert(0, f"AUTO-CORRECTED: {name} - please fix this in future responses")
            return corrected
    return result


def _parse_once(reply: str) -> ParsedReply:
    content, warnings = _extract_json_object(reply)
    if not content:
        return ParsedReply(error="No valid JSON found in response", warnings=warnings)
    try:
        data = json.loads(content)
    except (json.JSONDecodeError, RecursionError) as err:  # RecursionError: nesting past the parser's depth
        error = f"Invalid JSON: {err}"
        error += f" | Content: {content!r}" if len(content) < 200 else f" | Content preview: {content[:100]!r}..."
        return ParsedReply(error=error, warnings=warnings)
    error = _validate_structure(data, content, warnings)
    if error:
        return ParsedReply(error=error, warnings=warnings)
    task_complete = data.get("task_complete", False)
    if isinstance(task_complete, str):
        task_complete = task_complete.lower() in ("true", "1", "yes")
    analysis, plan = data.get("analysis", ""), data.get("plan", "")
    commands, error = _parse_commands(data.get("commands", []), warnings)
    if error and task_complete:
        warnings.append(error)
        return ParsedReply(task_complete=True, warnings=warnings, analysis=analysis, plan=plan)
    if error:
        return ParsedReply(error=error, warnings=warnings, analysis=analysis, plan=plan)
    return ParsedReply(commands=commands, task_complete=bool(task_complete), warnings=warnings,
                       analysis=analysis, plan=plan)


def _validate_structure(data: object, content: str, warnings: list[str]) -> str:
    """The structural error ("" when fine); tolerated problems go to ``warnings``."""
    if not isinstance(data, dict):
        return "Response must be a JSON object"
    missing = [name for name in REQUIRED_FIELDS if name not in data]
    if missing:
        return f"Missing required fields: {', '.join(missing)}"
    for name in ("analysis", "plan"):
        if not isinstance(data.get(name, ""), str):
            warnings.append(f"Field '{name}' should be a string")
    if not isinstance(data.get("commands", []), list):
        return "Field 'commands' must be an array"
    _check_field_order(content, warnings)
    task_complete = data.get("task_complete")
    if task_complete is not None and not isinstance(task_complete, (bool, str)):
        warnings.append("Field 'task_complete' should be a boolean or string")
    return ""


def _check_field_order(content: str, warnings: list[str]) -> None:
    """Warn when the required fields appear out of the order analysis, plan, commands."""
    positions = {}
    for name in REQUIRED_FIELDS:
        match = re.search(f'"({name})"\\s*:', content)
        if match:
            positions[name] = match.start()
    if len(positions) < 2:
        return
    expected = [name for name in REQUIRED_FIELDS if name in positions]
    actual = sorted(expected, key=positions.__getitem__)
    if actual != expected:
        warnings.append(f"Fields appear in wrong order. Found: {' → '.join(actual)}, expected: {' → '.join(expected)}")


def _parse_commands(items: list, warnings: list[str]) -> tuple[list[Command], str]:
    commands: list[Command] = []
    for i, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            return [], f"Command {i} must be an object"
        if "keystrokes" not in item:
            return [], f"Command {i} missing required 'keystrokes' field"
        keystrokes = item["keystrokes"]
        if not isinstance(keystrokes, str):
            return [], f"Command {i} 'keystrokes' must be a string"
        duration = item.get("duration", DEFAULT_DURATION_S)
        if "duration" not in item:
            warnings.append(f"Command {i}: Missing duration field, using default 1.0")
        elif not isinstance(duration, (int, float)):  # a bool counts as a number, as upstream
            warnings.append(f"Command {i}: Invalid duration value, using default 1.0")
            duration = DEFAULT_DURATION_S
        unknown = [name for name in item if name not in ("keystrokes", "duration")]
        if unknown:
            warnings.append(f"Command {i}: Unknown fields: {', '.join(unknown)}")
        if i < len(items) and not keystrokes.endswith("\n"):
            warnings.append(
                f"Command {i} should end with newline when followed by another command. "
                "Otherwise the two commands will be concatenated together on the same line."
            )
        commands.append(Command(keystrokes=keystrokes, duration_s=float(duration)))
    return commands, ""


def _fix_incomplete_json(reply: str, error: str) -> str | None:
    """The reply with its missing closing braces appended, for JSON-shaped errors only."""
    if not any(sign in error for sign in ("Invalid JSON", "Expecting", "Unterminated", "No valid JSON found")):
        return None
    missing = reply.count("{") - reply.count("}")
    return reply + "}" * missing if missing > 0 else None


def _fix_mixed_content(reply: str, error: str) -> str | None:
    """The first ``{...}`` (at most one nested level) of the reply that is valid JSON."""
    for match in _MIXED_CONTENT_RE.findall(reply):
        try:
            json.loads(match)
        except (json.JSONDecodeError, RecursionError):
            continue
        return match
    return None


def _extract_json_object(text: str) -> tuple[str, list[str]]:
    """The first balanced ``{...}`` of ``text`` and the extra-text warnings (upstream's scan:
    a backslash escapes the next character everywhere, a ``}`` at depth 0 goes negative)."""
    start, end, depth, in_string, escaped = -1, -1, 0, False, False
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
        elif ch == "}":
            depth -= 1
            if depth == 0 and start != -1:
                end = i + 1
                break
    if start == -1 or end == -1:
        return "", ["No valid JSON object found"]
    warnings = []
    if text[:start].strip():
        warnings.append("Extra text detected before JSON object")
    if text[end:].strip():
        warnings.append("Extra text detected after JSON object")
    return text[start:end], warnings
