"""Typed errors of every stage, each carrying the CLI exit code it maps to.

``swerl.cli.main`` catches :class:`SwerlError` once, prints its one-line message to stderr
and exits with ``exit_code``: 2 for bad input or config, 3 for the environment
(no Docker daemon, missing image), 1 for a failed run. Any other exception is a
bug in swerl and keeps its traceback.
"""

from __future__ import annotations


class SwerlError(Exception):
    """Base of all swerl errors; the message is one line naming the file/field and the fix."""

    exit_code: int = 1


class ConfigError(SwerlError, ValueError):
    """A config file, field or CLI flag is invalid (exit 2).

    Args:
        message: one line naming the file/field and the fix (the first problem when there are several).
        details: one line per further problem; the CLI prints them under ``-v``.
    """

    exit_code = 2

    def __init__(self, message: str = "", *, details: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.details = tuple(details)


class TaskError(SwerlError, ValueError):
    """A task folder or dataset row is malformed (exit 2)."""

    exit_code = 2


class EnvironmentProblem(SwerlError, RuntimeError):
    """The machine lacks something swerl needs: Docker daemon, base image, model file (exit 3)."""

    exit_code = 3


class SandboxError(SwerlError, RuntimeError):
    """A sandbox could not be built, started or talked to (exit 3 when it surfaces to the CLI).

    Args:
        message: one line naming what failed and the fix.
        outcome: the trial outcome it causes, a ``swerl.sandbox.Outcome`` (a ``str`` enum: this
            leaf module names no stage type); None reads as ``daemon_error`` (see
            ``swerl.sandbox.outcome_of``).

    Attributes:
        tamper: the container's tamper reasons when a verification failed after its scan
            (``Sandbox.verify`` sets them, so a failed trial's record still carries them).
    """

    exit_code = 3

    def __init__(self, message: str = "", *, outcome: str | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.tamper: list[str] = []


class SandboxTimeout(SandboxError, TimeoutError):
    """A Docker operation exceeded its deadline in seconds."""


class VerifierError(SwerlError, RuntimeError):
    """The verifier produced no usable reward (missing, empty, non-finite or out-of-range file) (exit 1)."""


class InferenceError(SwerlError, RuntimeError):
    """A generation backend failed or returned unusable output (missing or NaN log-probs) (exit 1)."""


class RunFailed(SwerlError, RuntimeError):
    """A run finished but did not do what it was asked (e.g. trained zero steps) (exit 1)."""


class Interrupted(SwerlError):
    """A run stopped by a signal: Ctrl-C (SIGINT, exit 130) or SIGTERM/SIGHUP (exit 143), after
    its cleanup. The message names where it stopped and the last committed checkpoint; the CLI
    adds the resume command (:meth:`with_resume`) and prints it as one ``interrupted:`` line.

    Args:
        message: where the run stopped and what a resume redoes.
        exit_code: 130 for SIGINT, 143 for SIGTERM/SIGHUP (128 + the signal's number).
    """

    def __init__(self, message: str = "", *, exit_code: int = 130) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def with_resume(self, command: str) -> "Interrupted":
        """The same interrupt, its message ending with ``resume: COMMAND``."""
        return Interrupted(f"{self}; resume: {command}", exit_code=self.exit_code)
