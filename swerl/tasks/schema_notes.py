"""The task.toml keys swerl reads but does not act on, each with what swerl does instead.

Two kinds: Harbor keys swerl knows (``mcp_servers``, ``skills_dir``, ``user``...; a table below
says what happens instead), and keys it does not know (a newer schema's, or typos): those are
kept and ignored. The loader warns about each once per process (:mod:`swerl.tasks.load`);
``swerl tasks validate`` lists them per task.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from swerl.tasks.task_folder import Task, VerifierImage
from swerl.tasks.task_toml import NEWEST_SCHEMA, ArtifactEntry, NetworkMode, TaskConfig


class UnsupportedKey(BaseModel):
    """One task.toml key swerl does not act on, and what it does instead."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="Dotted, e.g. environment.mcp_servers.")
    instead: str = Field(description="What swerl does instead (one phrase).")


UNKNOWN = f"not part of task.toml up to schema {NEWEST_SCHEMA} as swerl reads it; ignored"
_ENVIRONMENT = {
    "mcp_servers": "not started: swerl's agents get a bash tool, no MCP servers",
    "skills_dir": "not copied: swerl's agents read no skills folder",
    "env": "not set: swerl passes no host environment variables into a sandbox",
    "gpu_types": "ignored: swerl runs CPU sandboxes only",
}
_INSTEAD = {
    **{f"environment.{k}": v for k, v in _ENVIRONMENT.items()},
    **{f"verifier.environment.{k}": v for k, v in _ENVIRONMENT.items()},
    "agent.user": "ignored: the agent runs as the image's default user",
    "verifier.user": "ignored: the tests run as the image's default user",
    "verifier.collect": "not run: swerl has no compose services; the verifier gets the declared artifacts",
    "solution": "not read: solve.sh runs with the sandbox's own environment",
    "multi_step_reward_strategy": "ignored: swerl refuses [[steps]], so a task has one reward",
}
_ARTIFACT_FIELDS = {
    "destination": "ignored: swerl keeps no host copy; artifacts only travel into the clean room",
    "exclude": "ignored: the whole path is copied (bounded by sandbox.max_artifact_mb)",
}
# The defaults that mean "not given" (anything else is listed).
_EMPTY = (None, [], {})


def unsupported_keys(config: TaskConfig) -> list[UnsupportedKey]:
    """Every key of ``config`` swerl does not act on: the known Harbor keys first, then the unknown.

    Known Harbor keys come with what swerl does instead; unknown keys (``model_extra`` at any
    depth) with :data:`UNKNOWN`. An explicit ``environment_mode = "shared"`` beside declared
    artifacts is listed too: swerl still verifies those in the clean room.
    """
    found = [UnsupportedKey(key=key, instead=instead) for key, instead in _INSTEAD.items()
             if _value(config, key) not in _EMPTY]
    for field, instead in _ARTIFACT_FIELDS.items():
        if any(isinstance(a, ArtifactEntry) and getattr(a, field) not in _EMPTY for a in config.artifacts):
            found.append(UnsupportedKey(key=f"artifacts.{field}", instead=instead))
    if config.verifier.environment_mode == "shared" and config.work_product is not None:
        found.append(UnsupportedKey(key="verifier.environment_mode", instead=(
            "shared is not honoured for a task that declares artifacts: it is verified in the clean room "
            "(opt out: [verifier] same_container = true)")))
    found += [UnsupportedKey(key=key, instead=UNKNOWN) for key in _extra_keys(config, "")]
    return found


def _value(model: BaseModel, dotted: str) -> object:
    """The value at ``dotted`` (``verifier.environment.env``), or None when a table on the way is absent."""
    value: object = model
    for part in dotted.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def _extra_keys(model: BaseModel, prefix: str) -> list[str]:
    """Dotted names of the keys no field reads, at any depth (tables and lists of tables)."""
    keys = [prefix + k for k in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, BaseModel):
                keys += _extra_keys(item, f"{prefix}{name}.")
    return list(dict.fromkeys(keys))


class TaskNotes(BaseModel):
    """What ``swerl tasks validate`` says of one valid task: the schema it read, where its tests
    run under ``verification: auto``, the network each phase asks for, and the keys swerl does not act on."""

    name: str
    schema_version: str
    newer_schema: bool = Field(description=f"The schema is newer than {NEWEST_SCHEMA}; its unknown keys are ignored.")
    verification: Literal["clean_room", "same_container"] = Field(description="Where the tests run under auto.")
    verifier_image: VerifierImage = Field(description="task_image, docker_image or tests_dockerfile.")
    network: dict[str, NetworkMode] = Field(description="What the agent and the verifier phase ask for.")
    unsupported: list[UnsupportedKey]


def task_notes(task: Task) -> TaskNotes:
    """The :class:`TaskNotes` of one loaded task."""
    config = task.config
    return TaskNotes(
        name=task.name, schema_version=config.schema_version, newer_schema=config.schema_is_newer(),
        verification=task.auto_verification, verifier_image=task.verifier_image,
        network={"agent": config.agent_network().mode, "verifier": config.verifier_network().mode},
        unsupported=unsupported_keys(config),
    )
