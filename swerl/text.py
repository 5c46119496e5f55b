"""Words in CLI output and messages: a count with its noun in the right number ("1 step",
"2 steps"). A leaf module: it imports nothing of swerl."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, singular for exactly 1, else ``plural`` (default: noun + "s").

    Examples: ``counted(1, "step") == "1 step"``, ``counted(0, "step") == "0 steps"``,
    ``counted(2, "process", "processes") == "2 processes"``.
    """
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
