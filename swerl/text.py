"""Words in CLI output and messages: a count with its noun in the right number ("1 step",
"2 steps") and the closest of known names ("did you mean 'lr'?"). A leaf module: it imports
nothing of swerl."""

from __future__ import annotations

import difflib


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, singular for exactly 1, else ``plural`` (default: noun + "s").

    Examples: ``counted(1, "step") == "1 step"``, ``counted(0, "step") == "0 steps"``,
    ``counted(2, "process", "processes") == "2 processes"``.
    """
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def did_you_mean(key: str, known: list[str], listed: int | None = None, what: str = "keys") -> str:
    """``did you mean 'x'?`` for the closest known name (difflib, ratio >= 0.6), else ``known
    {what}: ...`` (the first ``listed`` names, then ``(+N more)``; all when None)."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    shown = known if listed is None else known[:listed]
    more = f" (+{len(known) - len(shown)} more)" if len(known) > len(shown) else ""
    return f"known {what}: {', '.join(shown)}{more}"
