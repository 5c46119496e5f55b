"""The ``task.toml`` of a Harbor task folder, schema 1.0 to 1.3, as pydantic models.

Harbor's schema 1.3 (its task-format docs, and its changelog of 2026-05-09, "separate verifier
environments") adds a top-level ``artifacts`` list (the work product), ``[verifier]
environment_mode`` with a ``[verifier.environment]`` table, ``[[steps]]``, a ``network_mode``
per phase (``public``, ``no-network``, ``allowlist`` with ``allowed_hosts``), and ``[environment]``
``healthcheck``, ``mcp_servers``, ``skills_dir``, ``os`` and ``workdir``. Each older spelling reads
as its newer one: ``version``/``schema_version``, ``[verifier] artifacts``/top-level ``artifacts``,
``allow_internet``/``network_mode``, ``memory = "4G"``/``memory_mb``. What swerl reads but does not
do is listed by :func:`swerl.tasks.schema_notes.unsupported_keys`; docs/tasks.md has the whole table.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The newest task.toml schema swerl reads; a newer one loads with a warning (its new keys ignored).
NEWEST_SCHEMA = "1.3"
# Longest timeout task.toml may ask for, seconds (one day): larger values are typos (1e12) or
# ways to park a sandbox forever.
MAX_TIMEOUT_S = 86_400.0
# Paths that can never be a work product: the verifier owns /tests and /logs, the kernel the rest;
# Harbor's convention folder for the agent's artifacts, /logs/artifacts, is the one exception.
_NOT_ARTIFACTS = ("/tests", "/logs", "/proc", "/sys", "/dev")
ARTIFACTS_DIR = "/logs/artifacts"

NetworkMode = Literal["public", "no-network", "allowlist"]
VerifierMode = Literal["shared", "separate"]


def _timeout(default: float, what: str) -> Any:
    """A finite timeout field in seconds, in (0, one day]."""
    return Field(default, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False, description=f"{what}, seconds (at most one day).")


def artifact_path(raw: str) -> str:
    """``raw`` normalized: absolute, below ``/``, no ``..``, not the verifier's or the kernel's folders.

    Raises:
        ValueError: naming the path and the fix.
    """
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if not raw.startswith("/") or ".." in parts or not parts:
        raise ValueError(f"{raw!r} must be an absolute path below / without '..' (e.g. \"/app\")")
    path = "/" + "/".join(parts)
    if path == ARTIFACTS_DIR or path.startswith(ARTIFACTS_DIR + "/"):
        return path
    if any(path == p or path.startswith(p + "/") for p in _NOT_ARTIFACTS):
        raise ValueError(f"{raw!r} is not a work product (the verifier owns /tests and /logs; "
                         f"{ARTIFACTS_DIR} is the one folder of /logs an agent may fill)")
    return path


def _size_mb(text: object, key: str) -> int:
    """Harbor's deprecated sizes (``"512M"``, ``"4G"``) in MiB."""
    units = {"K": 1 / 1024, "M": 1, "G": 1024}
    value = str(text).strip().upper()
    try:
        return int(float(value[:-1]) * units[value[-1]])
    except (KeyError, ValueError, IndexError):
        raise ValueError(f"{key} = {text!r} is not a size like \"512M\" or \"4G\"; or give {key}_mb in MiB") from None


class _Section(BaseModel):
    # Unknown keys are kept (``extra="allow"``); the loader warns about them once.
    model_config = ConfigDict(extra="allow")


class PhaseNetwork(NamedTuple):
    """The network one phase (agent or verifier) asks for."""

    mode: NetworkMode
    allowed_hosts: tuple[str, ...] = ()


class _Network(_Section):
    """``network_mode`` and ``allowed_hosts``: a phase override in ``[agent]``/``[verifier]``, the
    baseline in an environment table."""

    network_mode: NetworkMode | None = Field(
        None, description="public, no-network or allowlist; swerl grants public only with --allow-network and "
        "refuses an allowlist it cannot enforce (docs/tasks.md, Network). None: the phase's default.",
    )
    allowed_hosts: list[str] | None = Field(None, description="Hosts reachable with network_mode = \"allowlist\".")

    @model_validator(mode="after")
    def _hosts_need_allowlist(self) -> _Network:
        if self.allowed_hosts is not None and self.network_mode != "allowlist":
            raise ValueError('allowed_hosts is only read with network_mode = "allowlist"; set it or remove allowed_hosts')
        return self

    def explicit(self) -> PhaseNetwork | None:
        """The network this table asks for, or None when it names none."""
        if self.network_mode is None:
            return None
        return PhaseNetwork(self.network_mode, tuple(self.allowed_hosts or ()))


class HealthcheckSection(_Section):
    """``[environment.healthcheck]``: run in the started container before the agent (Docker's
    HEALTHCHECK semantics): healthy at the first success; failures during ``start_period_sec``
    do not count; ``retries`` failures in a row after it end the trial as ``healthcheck_failed``."""

    command: str = Field(min_length=1, description="Shell command; exit 0 means healthy.")
    interval_sec: float = Field(5.0, gt=0, le=3600, description="Seconds between attempts after the start period.")
    timeout_sec: float = _timeout(30.0, "Budget of one attempt")
    start_period_sec: float = Field(0.0, ge=0, le=MAX_TIMEOUT_S, description="Grace seconds whose failures do not count.")
    start_interval_sec: float = Field(5.0, gt=0, le=3600, description="Seconds between attempts in the start period.")
    retries: int = Field(3, ge=1, le=1000, description="Failures in a row, after the start period, that mean unhealthy.")


class AgentSection(_Network):
    """``[agent]`` of task.toml."""

    timeout_sec: float = _timeout(600.0, "Wall-clock budget of the agent")
    user: str | int | None = Field(None, description="Harbor's agent user; swerl runs the image's default user.")


class EnvironmentSection(_Network):
    """``[environment]`` of task.toml (and ``[verifier.environment]``, the same schema)."""

    build_timeout_sec: float = _timeout(600.0, "Image build budget")
    docker_image: str | None = Field(None, description="Prebuilt image; skips the build when set.")
    os: Literal["linux"] = Field("linux", description="Only linux: swerl runs Linux containers.")
    workdir: str | None = Field(None, description="Working folder of every command (overrides the image's WORKDIR).")
    cpus: float = Field(1.0, gt=0, le=1024, allow_inf_nan=False, description="CPU limit of the container (cores).")
    memory_mb: int = Field(2048, gt=0, le=1 << 20, description="Memory limit of the container, MiB.")
    storage_mb: int = Field(
        10240, gt=0, le=1 << 24,
        description="Disk budget of the container's writable layer (allocated blocks, or its inodes at the host "
        "file system's bytes per inode when that is more), MiB: swerl kills a container "
        "past it (the trial ends as disk_limit: the attempt's fault unless a control run fails too); see "
        "SandboxConfig.disk_poll_s.",
    )
    gpus: int = Field(0, ge=0, description="GPUs requested: swerl runs CPU sandboxes only, so only 0 is accepted.")
    allow_internet: bool = Field(
        False,
        description="Schema 1.0's network ask, read as network_mode = \"public\" (true) or \"no-network\" (false) "
        "when network_mode is absent. swerl grants it only with --allow-network (Harbor defaults true).",
    )
    healthcheck: HealthcheckSection | None = Field(None, description="Readiness check before the agent phase.")
    # Read so that their types are checked and `swerl tasks validate` can name them; swerl does not act on them.
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list, description="Not started by swerl.")
    skills_dir: str | None = Field(None, description="Not copied by swerl.")
    env: dict[str, str] = Field(default_factory=dict, description="Host variables; swerl passes none in.")
    gpu_types: list[str] | None = Field(None, description="Ignored: CPU sandboxes only.")

    @model_validator(mode="before")
    @classmethod
    def _legacy_sizes(cls, data: object) -> object:
        """Harbor's deprecated ``memory``/``storage`` strings as ``memory_mb``/``storage_mb``."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in ("memory", "storage"):
            if key in data:
                size = _size_mb(data.pop(key), key)
                if data.setdefault(f"{key}_mb", size) != size:
                    raise ValueError(f"{key} = {size} MiB and {key}_mb = {data[f'{key}_mb']} disagree; keep one")
        return data

    @field_validator("os", mode="before")
    @classmethod
    def _linux_only(cls, value: object) -> object:
        if isinstance(value, str) and value.lower() == "windows":
            raise ValueError('os = "windows" is not supported: swerl runs Linux containers only')
        return value.lower() if isinstance(value, str) else value

    @field_validator("workdir")
    @classmethod
    def _absolute_workdir(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"workdir = {value!r} must be an absolute path (e.g. \"/app\")")
        return value

    @field_validator("gpus")
    @classmethod
    def _no_gpus(cls, value: int) -> int:
        if value:
            raise ValueError(f"gpus = {value} is not supported: swerl runs CPU sandboxes only; set gpus = 0 or remove it")
        return value

    def network(self) -> PhaseNetwork:
        """The baseline network: ``network_mode``, else ``allow_internet`` (swerl's default: none)."""
        return self.explicit() or PhaseNetwork("public" if self.allow_internet else "no-network")


class VerifierSection(_Network):
    """``[verifier]`` of task.toml."""

    timeout_sec: float = _timeout(600.0, "Wall-clock budget of tests/test.sh")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for test.sh.")
    restart_environment: bool = Field(
        False, description="Harbor's restart before verifying; swerl does not restart, so only false is accepted "
        "(declare artifacts to verify in a fresh container of the pristine image).",
    )
    artifacts: list[str] | None = Field(
        None,
        description="swerl's first spelling of the work product; read as the top-level `artifacts` (the two lists "
        "are joined). Absolute paths copied into a fresh container where the tests run (the clean room).",
    )
    same_container: bool = Field(
        False,
        description="Verify in the agent's container even when artifacts are declared (a verifier that inspects "
        "the whole environment the agent left); a run's `verification = \"clean_room\"` overrides it.",
    )
    environment_mode: VerifierMode | None = Field(
        None, description="Harbor's shared (the agent's container) or separate (a container of its own). None: "
        "separate when [verifier.environment] is given, else shared.",
    )
    environment: EnvironmentSection | None = Field(
        None, description="The separate verifier's environment: its image (docker_image, else tests/Dockerfile, "
        "else the task image), limits and network. None with separate: a copy of [environment].",
    )
    user: str | int | None = Field(None, description="Harbor's verifier user; swerl runs the image's default user.")
    collect: list[dict[str, Any]] = Field(default_factory=list, description="Compose hooks; not run by swerl.")

    @field_validator("restart_environment")
    @classmethod
    def _no_restart(cls, value: bool) -> bool:
        if value:
            raise ValueError("restart_environment = true is not supported: remove it, or declare `artifacts` "
                             "to verify in a fresh container")
        return value

    @field_validator("artifacts")
    @classmethod
    def _artifact_paths(cls, paths: list[str] | None) -> list[str] | None:
        return None if paths is None else [artifact_path(p) for p in paths]

    @model_validator(mode="after")
    def _one_mode(self) -> VerifierSection:
        if self.environment_mode == "shared" and self.environment is not None:
            raise ValueError('environment_mode = "shared" contradicts [verifier.environment]; '
                             'set environment_mode = "separate" or remove the table')
        if self.same_container and self.mode == "separate":
            raise ValueError("same_container = true contradicts a separate verifier environment; keep one")
        return self

    @property
    def mode(self) -> VerifierMode:
        """Harbor's resolution: the explicit mode, else separate when a verifier environment is given."""
        if self.environment_mode is not None:
            return self.environment_mode
        return "separate" if self.environment is not None else "shared"


class ArtifactEntry(_Section):
    """One table of the top-level ``artifacts`` list (a plain string is the same with ``source`` only)."""

    source: str = Field(description="Absolute path in the agent's container.")
    destination: str | None = Field(None, description="Harbor's host copy; swerl keeps none.")
    exclude: list[str] = Field(default_factory=list, description="Harbor's tar excludes; swerl copies the whole path.")
    service: str | None = Field(None, description="Compose service; only the main container exists in swerl.")

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        return artifact_path(value)

    @field_validator("service")
    @classmethod
    def _main_only(cls, value: str | None) -> str | None:
        if value not in (None, "main"):
            raise ValueError(f"service = {value!r}: compose services are not supported; collect from the main container")
        return value


class TaskConfig(_Section):
    """The whole ``task.toml`` with the defaults of docs/tasks.md."""

    schema_version: str = Field("1.0", description="Schema of the file (schema 1.0 spelled it `version`).")
    metadata: dict[str, Any] = Field(default_factory=dict)
    task: dict[str, Any] | None = Field(None, description="Harbor's package info (name, authors...); informational.")
    source: str | None = Field(None, description="Where the task comes from; informational.")
    artifacts: list[str | ArtifactEntry] = Field(
        default_factory=list, description="The agent's work product (absolute paths): the tests run in a fresh "
        "container holding only these (the clean room). Joined with [verifier] artifacts.",
    )
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: dict[str, Any] = Field(default_factory=dict, description="Harbor's [solution] env; not set by swerl.")
    steps: list[dict[str, Any]] | None = Field(None, description="Refused: one instruction and one verification per trial.")
    multi_step_reward_strategy: str | None = Field(None, description="Only read with [[steps]]; ignored.")

    @model_validator(mode="before")
    @classmethod
    def _version_rename(cls, data: object) -> object:
        """Schema 1.0's ``version`` is 1.3's ``schema_version``."""
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            version = data.pop("version")
            if data.setdefault("schema_version", version) != version:
                raise ValueError(f"version = {version!r} and schema_version = {data['schema_version']!r} disagree; keep one")
        return data

    @field_validator("artifacts", mode="before")
    @classmethod
    def _artifact_strings(cls, value: object) -> object:
        if isinstance(value, list):
            return [artifact_path(v) if isinstance(v, str) else v for v in value]
        return value

    @field_validator("steps")
    @classmethod
    def _no_steps(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value is not None:
            raise ValueError("multi-step tasks ([[steps]]) are not supported: swerl runs one instruction and one "
                             "verification per trial; split the steps into separate tasks")
        return value

    @property
    def work_product(self) -> list[str] | None:
        """The declared artifacts of both spellings, in order, each once; None when neither declares any."""
        paths = [a if isinstance(a, str) else a.source for a in self.artifacts] + list(self.verifier.artifacts or [])
        unique = list(dict.fromkeys(paths))
        return unique or None

    @property
    def verifier_environment(self) -> EnvironmentSection:
        """The environment the tests run in: ``[verifier.environment]`` when given, else ``[environment]``."""
        return self.verifier.environment or self.environment

    def agent_network(self) -> PhaseNetwork:
        """The agent phase: ``[agent] network_mode``, else the environment's baseline."""
        return self.agent.explicit() or self.environment.network()

    def verifier_network(self) -> PhaseNetwork:
        """The verifier phase: ``[verifier] network_mode``, else the baseline of the environment it runs in."""
        if explicit := self.verifier.explicit():
            return explicit
        return (self.verifier_environment if self.verifier.mode == "separate" else self.environment).network()

    def schema_is_newer(self) -> bool:
        """True when ``schema_version`` is a number above :data:`NEWEST_SCHEMA`."""
        return _version_key(self.schema_version) > _version_key(NEWEST_SCHEMA)


def _version_key(text: str) -> tuple[int, ...]:
    """``"1.3"`` -> ``(1, 3)``; a version that is not dotted numbers sorts first."""
    try:
        return tuple(int(part) for part in text.strip().split("."))
    except ValueError:
        return ()
