"""Typed data of the sandbox stage: its config, exec results, verifier outcomes and trial records.

Everything that leaves ``swerl.sandbox`` is one of these pydantic models, never a loose dict.
Outcomes and failure classes follow the verifier protocol and failure classes of docs/sandbox.md.
"""

from __future__ import annotations

import enum
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerl.sandbox.deployment.config import EngineConfig



class FailureClass(enum.StrEnum):
    """What a trial does to training (the failure classes of docs/sandbox.md); the one
    definition every stage uses (a ``StrEnum``: it compares and prints as its value)."""

    none = "none"  # a reward was read
    mask = "mask"  # infrastructure or verifier fault: no trainable tokens, out of the RLOO baseline
    zero = "zero"  # the agent's own failure: reward 0, kept in the baseline


Verification = Literal["clean_room", "same_container"]
# Longest deadline a config may name, seconds (one day); beyond it is a typo or a parked sandbox.
MAX_DEADLINE_S = 86_400.0


def _seconds(default: float | None, description: str) -> Any:
    """A finite deadline field in seconds, in (0, one day]."""
    return Field(default, gt=0, le=MAX_DEADLINE_S, allow_inf_nan=False, description=description)


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
    disk_limit = "disk_limit"
    healthcheck_failed = "healthcheck_failed"

    @property
    def failure_class(self) -> FailureClass:
        """What the trial does to training (docs/tasks.md, Failure classes): ``mask`` for infrastructure and verifier
        faults (excluded from the RLOO baseline), ``zero`` for the agent's own failures
        (reward 0, kept), ``none`` when a reward was read."""
        return _FAILURE_CLASS[self]


_FAILURE_CLASS: dict[Outcome, FailureClass] = {
    Outcome.passed: FailureClass.none,
    Outcome.failed: FailureClass.none,
    # The tests hang or blow the memory limit because of the code under test: the agent's fault.
    Outcome.verifier_timeout: FailureClass.zero,
    Outcome.oom: FailureClass.zero,
    # The verifier or the machine misbehaved: no trustworthy reward, so mask the trial.
    Outcome.no_reward_file: FailureClass.mask,
    Outcome.bad_reward: FailureClass.mask,
    Outcome.build_error: FailureClass.mask,
    Outcome.start_error: FailureClass.mask,
    Outcome.daemon_error: FailureClass.mask,
    # The container's writable layer passed [environment] storage_mb (or the work product the
    # artifact cap): the trial is stopped, no reward is trusted, the host disk is protected.
    Outcome.disk_limit: FailureClass.mask,
    # The task's [environment.healthcheck] never passed before the agent (or the tests) began: the
    # environment, not the agent, is broken.
    Outcome.healthcheck_failed: FailureClass.mask,
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
        False, description="Grant the public network to the phases that ask for it (task.toml network_mode = "
        "\"public\", or allow_internet = true); a task asking for an allowlist is then refused (swerl cannot enforce one).",
    )
    warm_pool: bool = Field(
        True, description="Pre-create and start containers ahead of use (one fresh container per trial)."
    )
    warm_pool_size: int | None = Field(
        None, ge=0, description="Idle started containers kept per image; None means min(concurrency, 4)."
    )
    verifier_timeout_s: float | None = _seconds(
        None, "Overrides every task's [verifier] timeout_sec, seconds (the seed run used 120); None = task.toml."
    )
    verification: Literal["auto", "clean_room", "same_container"] = Field(
        "auto",
        description=(
            "Where the hidden tests run. clean_room: in a fresh container of the pristine verifier image (the task "
            "image, or a separate verifier environment's) holding only the agent's work product (the declared "
            "artifacts, either spelling, plus /logs/artifacts; a task that declares none gets its image's WORKDIR). "
            "same_container: in the agent's own container (hardened: an unblockable wipe of /logs/verifier and /tests, "
            "every process killed before and after the tests); a task whose tests live in a separate verifier image "
            "is still verified there. auto: clean room for tasks that declare artifacts or a separate verifier "
            "([verifier] environment_mode = \"separate\"), unless [verifier] same_container = true; same container "
            "for tasks that declare neither (their verifier may inspect anything the agent changed, so swerl does "
            "not guess their work product)."
        ),
    )
    max_artifact_mb: int = Field(
        256, ge=1, le=1 << 20,
        description="Largest work product copied into the clean room, MiB; more ends the trial as disk_limit.",
    )
    pids_limit: int = Field(512, ge=16, description="Most processes inside one container (fork bombs).")
    max_output_bytes: int = Field(
        1_000_000, ge=1024, description="Exec output kept (head half + tail half); the rest is counted."
    )
    docker_timeout_s: float = _seconds(60.0, "Deadline of one Docker API call (create, start, copy, remove), seconds.")
    start_timeout_s: float = _seconds(120.0, "Deadline to create and start a container, seconds.")
    drain_timeout_s: float = _seconds(60.0, "Deadline to remove everything on exit, seconds.")
    disk_poll_s: float | None = _seconds(
        2.0,
        "Seconds between checks of each trial container's writable-layer size (Docker's SizeRw) against "
        "[environment] storage_mb; past it the container is killed and the trial ends as disk_limit. overlay2 "
        "on ext4 has no per-container quota, so this poll is the bound: storage_mb + write rate x poll. None = off.",
    )
    min_free_disk_mb: int = Field(
        2048, ge=0,
        description="Free MiB Docker's data root must have when a manager opens (else exit 3 naming the path); 0 = no check.",
    )
    image_cache_mb: int | None = Field(
        20480, ge=0,
        description="Budget of cached swerl-task images (their own layers, MiB); after a build the least recently "
        "used task images beyond it are removed (never base images or images a container uses). None = unbounded.",
    )
    gc_dead_runs: bool = Field(True, description="At start, remove containers of runs whose process died.")
    docker_base_url: str | None = Field(
        None, description="The one Docker engine when `engines` is empty (e.g. unix:///var/run/docker.sock); "
        "None = DOCKER_HOST, else the local socket."
    )
    engines: list[EngineConfig] = Field(
        default_factory=list,
        description="The Docker-API engines of the fleet; trials go to the engine with the most free slots. "
        "Empty = one local engine (docker_base_url).",
    )
    runtime: str | None = Field(
        None, min_length=1,
        description="OCI runtime of trial containers (Docker's --runtime), registered with the engine (dockerd "
        "--add-runtime NAME=PATH): e.g. runsc (gVisor) for a kernel boundary, crun for cheaper container starts. "
        "None = the engine's default (runc).",
    )
    engine_retries: int = Field(
        2, ge=0, le=10,
        description="Times a trial whose engine stopped answering is run again on another engine before it is masked.",
    )
    engine_probe_s: float = _seconds(
        1.0, "First wait before a quarantined engine is probed again, seconds; doubles per failed probe up to 30 s.",
    )

    @model_validator(mode="after")
    def _one_way_to_name_engines(self) -> SandboxConfig:
        if self.engines and self.docker_base_url:
            raise ValueError("sandbox.docker_base_url and sandbox.engines both set; list the engine in engines instead")
        urls = [e.url for e in self.engines]
        if len(set(urls)) != len(urls):
            raise ValueError(f"sandbox.engines lists an engine twice ({urls}); give each url once")
        return self

    def engine_list(self) -> list[EngineConfig]:
        """The engines to use: ``engines``, else the one of ``docker_base_url`` (None url = local
        default, resolved by :func:`swerl.sandbox.docker_api.engine_url`)."""
        if self.engines:
            return list(self.engines)
        return [EngineConfig.model_construct(url=self.docker_base_url, slots=None, tls=None, runtime=None)]


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
    """Verdict of the task's hidden tests (docs/tasks.md, The verifier protocol).

    Attributes:
        outcome: typed outcome; ``passed`` iff the reward is 1.
        reward: in [0, 1]; 0 for every outcome other than passed/failed.
        failure_class: ``none``/``mask``/``zero`` (docs/tasks.md, Failure classes).
        output_tail: last few KiB of ``/logs/verifier/test-stdout.txt`` (decoded with replacement).
        duration_s: wall-clock seconds of the whole verification.
        detail: one line saying why, for anything but ``passed``.
        verification: where the tests ran: ``clean_room`` (fresh container, only the work product
            copied in) or ``same_container`` (the agent's own container, hardened).
        verifier_image: the image the tests ran in: the task's own, or a separate verifier's
            (``[verifier.environment] docker_image`` or built from ``tests/Dockerfile``).
    """

    outcome: Outcome
    reward: float = 0.0
    failure_class: FailureClass = FailureClass.none
    output_tail: str = ""
    duration_s: float = 0.0
    detail: str = ""
    verification: Verification | None = None
    verifier_image: str | None = None


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
    failure_class: FailureClass = FailureClass.none
    detail: str = ""
    verification: Verification | None = Field(None, description="Where the tests ran; None when the trial ended before.")
    verifier_image: str | None = Field(
        None, description="The image the tests ran in (the task's, or a separate verifier environment's); None when "
        "the trial ended before.",
    )
    engine: str | None = Field(None, description="URL of the Docker engine the trial ran on (its last attempt).")
    engine_retries: int = Field(0, description="Times the trial was moved to another engine because its engine stopped answering.")
    timings: TrialTimings = Field(default_factory=TrialTimings)
