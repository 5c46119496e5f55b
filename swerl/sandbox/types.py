"""Typed data of the sandbox stage: its config, exec results, verifier outcomes and trial records.

Everything that leaves ``swerl.sandbox`` is one of these pydantic models, never a loose dict.
Outcomes and failure classes follow the verifier protocol and failure classes of docs/sandbox.md.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerl.sandbox.engine_config import EngineConfig



class FailureClass(enum.StrEnum):
    """What a trial does to training (the failure classes of docs/sandbox.md); the one
    definition every stage uses (a ``StrEnum``: it compares and prints as its value)."""

    none = "none"  # a reward was read
    mask = "mask"  # infrastructure or verifier fault: no trainable tokens, out of the RLOO baseline
    zero = "zero"  # the agent's own failure: reward 0, kept in the baseline


class Blame(enum.StrEnum):
    """Who a trial without a trustworthy reward is blamed on, decided by a control run
    (:mod:`swerl.sandbox.control`): the same verification in a fresh sandbox of the pristine image."""

    attempt = "attempt"  # the control read a reward: the attempt caused the failure (class zero)
    infrastructure = "infrastructure"  # the control failed too: the task or the engine is at fault (class mask)


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
    copy_out_error = "copy_out_error"
    trial_error = "trial_error"
    healthcheck_failed = "healthcheck_failed"

    @property
    def failure_class(self) -> FailureClass:
        """What the trial does to training before any control run (docs/sandbox.md, Outcomes and
        failure classes): ``none`` when a reward was read, ``zero`` for failures of the code under
        test by their nature (reward 0, kept), ``mask`` for every other failure. Once the agent has
        acted, a ``mask`` stands only when a control run fails too (:mod:`swerl.sandbox.control`);
        when the control reads a reward the trial becomes ``zero``."""
        return _FAILURE_CLASS[self]


_FAILURE_CLASS: dict[Outcome, FailureClass] = {
    Outcome.passed: FailureClass.none,
    Outcome.failed: FailureClass.none,
    # The tests hang or blow the memory limit because of the code under test: the agent's fault.
    Outcome.verifier_timeout: FailureClass.zero,
    Outcome.oom: FailureClass.zero,
    # No trustworthy reward: masked when nothing ran yet (the image, the container) or when a control
    # run fails too; zero when the control reads a reward (the attempt caused it).
    Outcome.no_reward_file: FailureClass.mask,
    Outcome.bad_reward: FailureClass.mask,
    Outcome.build_error: FailureClass.mask,
    Outcome.start_error: FailureClass.mask,
    Outcome.daemon_error: FailureClass.mask,
    # The container's allocated disk passed [environment] storage_mb (or the work product the artifact
    # cap): the container is stopped and the host disk protected; its own budget, so the control decides.
    Outcome.disk_limit: FailureClass.mask,
    # The work product could not be read out (a malformed or truncated archive).
    Outcome.copy_out_error: FailureClass.mask,
    # An unexpected exception inside the trial (a swerl bug or an unforeseen failure): it ends that trial only.
    Outcome.trial_error: FailureClass.mask,
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
        None, ge=0, description="Idle started containers kept per image; None: sized from the step's plan (the "
        "episodes a step runs at once on the engine, at most its slots, times the containers a trial takes), "
        "min(slots, 4) per container of a trial before any plan."
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
        description="Largest work product copied into the clean room (its archive as the engine streams it: a "
        "sparse file counts at its apparent size), MiB; more ends the trial as disk_limit (a control run decides whose fault).",
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
        "Seconds between checks of the disk each trial container's writable layer holds (the larger of its allocated "
        "blocks and its inodes x the file system's bytes per inode; Docker's SizeRw, bytes alone, for an engine whose "
        "data root this host cannot see) against [environment] storage_mb; past it the "
        "container is killed and the trial ends as disk_limit. overlay2 on ext4 has no per-container quota, so this "
        "poll is the bound: storage_mb + write rate x poll. None = off.",
    )
    min_free_disk_mb: int = Field(
        2048, ge=0,
        description="Free MiB Docker's data root must have when a manager opens (else exit 3 naming the path); 0 = no check.",
    )
    admission_wait_s: float = _seconds(
        60.0, "Most seconds a trial waits for its engine's free disk to cover its [environment] storage_mb once no "
        "other trial is in flight there (while trials are in flight it waits for them to end); then it is refused "
        "(start_error, masked: it never acted). Each trial reserves its storage_mb from admission until its "
        "containers are removed.",
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
    registry: str | None = Field(
        None, pattern=r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$",
        description="HOST:PORT of the fleet's container registry: a task image is built once, pushed there and pulled "
        "by each other engine on first use (as are FROM images an engine lacks). Each engine's dockerd must reach "
        "it and trust it (plain HTTP: its insecure-registries, 127.0.0.0/8 by default; TLS: "
        "/etc/docker/certs.d/HOST:PORT/ca.crt). None = images are copied between engines through swerl.",
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
    tamper_scan: bool = Field(
        True,
        description="Before the tests run, judge what the agent's container changed against its image (files that touch "
        "the verifier's output, inputs, tools, import path or pytest config; docs/sandbox.md, Tamper signal) and record "
        "the reasons on the result. Read from the engine's storage on this host (~1 ms) or its changes API (~0.4 s of "
        "engine CPU, Docker 20.10); False = no scan.",
    )
    tamper_scan_max_changes: int = Field(
        100_000, ge=1,
        description="Most changed paths the tamper scan reads (~60 us each on this host); a container with more is "
        "flagged `scan: ... over N paths` instead of judged, so a flood of empty files cannot blind the scan.",
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
        return [EngineConfig.model_construct(
            url=self.docker_base_url, slots=None, tls=None, runtime=None, max_creates_per_s=None, warm=None)]


@dataclass(frozen=True)
class Placement:
    """Where one trial's sandbox runs, decided by the manager before the sandbox starts.

    Attributes:
        engine: URL of the Docker engine it runs on.
        image: the agent's image (the tests run in it when they run in the agent's container).
        verifier_image: the clean room's image (the task's, or a separate verifier environment's);
            ``image`` when the trial verifies in the agent's container.
    """

    engine: str
    image: str
    verifier_image: str


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
        work_product_dropped: members of the work product left out of the clean room, by reason
            (:mod:`swerl.sandbox.runtime.workproduct`); empty when none was.
        verifier_image: the image the tests ran in: the task's own, or a separate verifier's
            (``[verifier.environment] docker_image`` or built from ``tests/Dockerfile``).
        tamper: why the agent's container looks like an attempt on the verifier (one line each,
            ``family: what``; docs/sandbox.md, Tamper signal); empty when nothing touched it.
    """

    outcome: Outcome
    reward: float = 0.0
    failure_class: FailureClass = FailureClass.none
    output_tail: str = ""
    duration_s: float = 0.0
    detail: str = ""
    verification: Verification | None = None
    work_product_dropped: dict[str, int] = Field(default_factory=dict)
    verifier_image: str | None = None
    tamper: list[str] = Field(default_factory=list)


class TrialTimings(BaseModel):
    """Seconds spent in each phase of one trial; ``cleanup_s``: the wait for the removal of the
    trial's containers, which the trial awaits before it ends (a control run starts after it).
    ``wait_s``: from asking for the sandbox to holding its started container (slots, disk
    admission, images, the container itself); ``warm_containers`` / ``cold_containers``: the
    trial's containers taken from a warm pool / started on demand (the clean room's verifier
    container included)."""

    build_s: float = 0.0
    start_s: float = 0.0
    wait_s: float = 0.0
    warm_containers: int = 0
    cold_containers: int = 0
    agent_s: float = 0.0
    verify_s: float = 0.0
    control_s: float = 0.0
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
    blame: Blame | None = Field(
        None, description="Decided by a control run when the trial read no trustworthy reward after the attempt acted: "
        "attempt (class zero) or infrastructure (class mask; the task is flagged). None when no control ran.")
    acted: bool = Field(False, description="The attempt's sandbox started, so the attempt could act (a control may then run).")
    work_product_dropped: dict[str, int] = Field(
        default_factory=dict, description="Members of the work product left out of the clean room, by reason.")
    tamper: list[str] = Field(default_factory=list, description="Tamper reasons (docs/sandbox.md, Tamper signal); empty = none.")
    timings: TrialTimings = Field(default_factory=TrialTimings)
