"""Verifier files that swerl's task generators copy verbatim into a task's ``tests/``.

They run inside the sandbox image, not in swerl: standard library only, Python >= 3.8.

- ``swerl_run_tests.py``: runs pytest with a pinned configuration in a clean child process,
  reads its JUnit report through a pipe, and writes reward 1 only when exactly the expected
  number of tests passed (none failed, errored, skipped or xfailed) and pytest exited 0.
- ``swerl_solution_proxy.py``: calls the solution's function in a separate, confined worker
  process; arguments and results cross as plain builtin values (exact types), so nothing the
  solution does can run inside the judging process.

See ``docs/redteam.md`` for the attacks these stop and the ones they cannot.
"""

from __future__ import annotations

from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent
RUNNER = "swerl_run_tests.py"
PROXY = "swerl_solution_proxy.py"


def harness_text(name: str) -> str:
    """The source of one harness file (``RUNNER`` or ``PROXY``), to copy into a task's ``tests/``."""
    return (HARNESS_DIR / name).read_text(encoding="utf-8")
