"""Typed data of the sandbox stage: its config, exec results, verifier outcomes and trial records.

Everything that leaves ``swerl.sandbox`` is one of these pydantic models, never a loose dict.
Outcomes and failure classes follow ``shared/spec/tasks.md`` §2 and §6.
"""

from __future__ import annotations

import enum
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FailureClass = Literal["none", "mask", "zero"]


class Outcome(str, enum.Enum):
    """How one trial ended. ``passed``/``failed`` carry a real reward; the rest give reward 0."""

    passed = "passed"
    failed = "failed"
    verifier_timeout = "verifier_timeout"
    no_reward_file = "no_reward_file"
    bad_reward = "bad_reward"
    build_error = "build_error"
    start_error = "start_error"
    oom = "oom"
    daemon_error = "daemon_error"

    @property
    def failure_class(self) -> FailureClass:
        """What the trial does to training (spec §6): ``mask`` for infrastructure and verifier
        faults (excluded from the RLOO baseline), ``zero`` for the agent's own failures
        (reward 0, kept), ``none`` when a reward was read."""
        return _FAILURE_CLASS[self]


_FAILURE_CLASS: dict[Outcome, FailureClass] = {
    Outcome.passed: "none",
    Outcome.failed: "none",
    # The tests hang or blow the memory limit because of the code under test: the agent's fault.
    Outcome.verifier_timeout: "zero",
    Outcome.oom: "zero",
    # The verifier or the machine misbehaved: no trustworthy reward, so mask the trial.
    Outcome.no_reward_file: "mask",
    Outcome.bad_reward: "mask",
    Outcome.build_error: "mask",
    Outcome.start_error: "mask",
    Outcome.daemon_error: "mask",
}


class SandboxConfig(BaseModel):
    """Settings of a :class:`~swerl.sandbox.manager.SandboxManager` (one per process)."""

    model_config = ConfigDict(extra="forbid")

    run_id: str | None = Field(
        None, description="Label value ``swerl.run`` on every container; a fresh id when None."
    )
    concurrency: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        description="Most sandboxes alive at once (semaphore); also sizes the HTTP connection pool.",
    )
    allow_network: bool = Field(
        False, description="Grant network to tasks whose task.toml sets allow_internet = true."
    )
    warm_pool: bool = Field(
        True, description="Pre-create and start containers ahead of use (one fresh container per trial)."
    )
    warm_pool_size: int | None = Field(
        None, ge=0, description="Idle started containers kept per image; None means min(concurrency, 4)."
    )
    verifier_timeout_s: float | None = Field(
        None, gt=0, description="Overrides every task's [verifier] timeout_sec, seconds (the seed run used 120); None = task.toml."
    )
    pids_limit: int = Field(512, ge=16, description="Most processes inside one container (fork bombs).")
    max_output_bytes: int = Field(
        1_000_000, ge=1024, description="Exec output kept (head half + tail half); the rest is counted."
    )
    docker_timeout_s: float = Field(
        60.0, gt=0, description="Deadline of one Docker API call (create, start, copy, remove), seconds."
    )
    start_timeout_s: float = Field(120.0, gt=0, description="Deadline to create and start a container, seconds.")
    drain_timeout_s: float = Field(60.0, gt=0, description="Deadline to remove everything on exit, seconds.")
    gc_dead_runs: bool = Field(True, description="At start, remove containers of runs whose process died.")
    docker_base_url: str | None = Field(
        None, description="Docker endpoint (e.g. unix:///var/run/docker.sock); None = from the environment."
    )


class ExecResult(BaseModel):
    """Result of one command run inside a sandbox.

    Attributes:
        exit_code: the command's exit status; None when it was killed by the timeout or the
            stream broke before the status was known.
        output: stdout and stderr interleaved, decoded as UTF-8 with replacement; at most
            ``max_output_bytes`` (head and tail kept).
        timed_out: True when the timeout killed the command (inside the container).
        duration_s: wall-clock seconds from start to end as seen by swerl.
        truncated_bytes: bytes dropped from the middle of the output.
    """

    exit_code: int | None
    output: str
    timed_out: bool = False
    duration_s: float = 0.0
    truncated_bytes: int = 0


class VerifierResult(BaseModel):
    """Verdict of the task's hidden tests (spec §2).

    Attributes:
        outcome: typed outcome; ``passed`` iff the reward is 1.
        reward: in [0, 1]; 0 for every outcome other than passed/failed.
        failure_class: ``none``/``mask``/``zero`` (spec §6).
        output_tail: last few KiB of ``/logs/verifier/test-stdout.txt`` (decoded with replacement).
        duration_s: wall-clock seconds of the whole verification.
        detail: one line saying why, for anything but ``passed``.
    """

    outcome: Outcome
    reward: float = 0.0
    failure_class: FailureClass = "none"
    output_tail: str = ""
    duration_s: float = 0.0
    detail: str = ""


class TrialTimings(BaseModel):
    """Seconds spent in each phase of one trial; ``cleanup_s`` is filled when the background
    removal finishes (it is off the critical path)."""

    build_s: float = 0.0
    start_s: float = 0.0
    agent_s: float = 0.0
    verify_s: float = 0.0
    cleanup_s: float = 0.0


class TrialRecord(BaseModel):
    """One trial of ``sandbox-test`` or of a rollout: which task, which attempt, how it ended."""

    task: str
    attempt: str = Field(description="`oracle`, `null` or an agent name.")
    outcome: Outcome
    reward: float = 0.0
    failure_class: FailureClass = "none"
    detail: str = ""
    timings: TrialTimings = Field(default_factory=TrialTimings)
