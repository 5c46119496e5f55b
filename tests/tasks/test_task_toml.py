"""swerl.tasks.task_toml and schema_notes: Harbor's schema 1.0 and 1.3 spellings mean the same,
a separate verifier and declared artifacts give the clean room in every spelling, each phase's
network resolves as Harbor resolves it, what swerl cannot run is refused in one line, and what it
reads but does not act on is named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from swerl.tasks import MalformedTask, import_humaneval, load_task
from swerl.tasks.schema_notes import UNKNOWN, task_notes, unsupported_keys
from swerl.tasks.task_toml import PhaseNetwork, TaskConfig

HARBOR13 = Path(__file__).resolve().parents[1] / "fixtures" / "harbor13"
SPELLING_10 = """version = "1.0"

[verifier]
timeout_sec = 120.0
artifacts = ["/app"]

[environment]
memory_mb = 2048
allow_internet = false
"""
SPELLING_13 = """version = "1.3"
artifacts = ["/app"]

[verifier]
timeout_sec = 120.0
environment_mode = "separate"

[environment]
memory = "2G"
network_mode = "no-network"
"""
SPELLING_13_TABLE = """schema_version = "1.3"
artifacts = [{ source = "/app" }]

[verifier]
timeout_sec = 120.0

[environment]
memory_mb = 2048
network_mode = "no-network"
"""


def _sandbox_facts(task) -> dict:
    """Everything the sandbox decides from a task.toml."""
    config = task.config
    return {"work": config.work_product, "carried": task.clean_room_paths, "auto": task.auto_verification,
            "image": task.verifier_image, "tests_in_image": task.tests_in_verifier_image,
            "agent_net": config.agent_network(), "verifier_net": config.verifier_network(),
            "memory_mb": config.verifier_environment.memory_mb, "timeout": config.verifier.timeout_sec}


def test_the_10_and_13_spellings_of_a_humaneval_task_mean_the_same(tmp_path: Path):
    [folder] = import_humaneval(tmp_path / "he", limit=1)
    facts = {}
    for label, text in (("1.0", SPELLING_10), ("1.3", SPELLING_13), ("1.3 table", SPELLING_13_TABLE)):
        copy = shutil.copytree(folder, tmp_path / label.replace(" ", "-"))
        (copy / "task.toml").write_text(text)
        facts[label] = _sandbox_facts(load_task(copy))
    imported = _sandbox_facts(load_task(folder))  # the importer's own spelling
    assert facts["1.0"] == facts["1.3"] == facts["1.3 table"] == imported
    assert imported["auto"] == "clean_room" and imported["carried"] == ["/app", "/logs/artifacts"]
    assert imported["agent_net"] == imported["verifier_net"] == PhaseNetwork("no-network")
    assert load_task(folder).config.schema_version == "1.3"


def test_a_separate_verifier_runs_in_its_own_image_and_keeps_its_tests():
    built, prebuilt = load_task(HARBOR13 / "separate-verifier-image"), load_task(HARBOR13 / "separate-prebuilt-verifier")
    assert (built.verifier_image, prebuilt.verifier_image) == ("tests_dockerfile", "docker_image")
    assert built.tests_in_verifier_image and prebuilt.tests_in_verifier_image
    assert prebuilt.config.verifier.mode == "separate"  # implied by [verifier.environment]
    assert built.clean_room_paths == ["/logs/artifacts"]  # answer.txt lies below it
    assert prebuilt.config.verifier_environment.docker_image == "swerl-fixture/prebuilt-verifier:1"


def test_declared_artifacts_keep_the_clean_room_in_every_spelling_and_schema():
    newer = load_task(HARBOR13 / "newer-schema")
    assert newer.config.schema_is_newer() and newer.auto_verification == "clean_room"
    shared = TaskConfig.model_validate({"artifacts": ["/app"], "verifier": {"environment_mode": "shared"}})
    assert shared.work_product == ["/app"]
    assert [n.key for n in unsupported_keys(shared)] == ["verifier.environment_mode"]
    opted_out = TaskConfig.model_validate({"verifier": {"artifacts": ["/app"], "same_container": True}})
    assert opted_out.work_product == ["/app"] and opted_out.verifier.mode == "shared"


def test_each_phase_resolves_its_network_as_harbor_does():
    def nets(data: dict) -> tuple[str, str]:
        config = TaskConfig.model_validate(data)
        return config.agent_network().mode, config.verifier_network().mode

    assert nets({}) == ("no-network", "no-network")  # swerl asks nothing unless the task does (Harbor: public)
    assert nets({"environment": {"allow_internet": True}}) == ("public", "public")
    assert nets({"environment": {"allow_internet": True, "network_mode": "no-network"}}) == ("no-network", "no-network")
    assert nets({"agent": {"network_mode": "public"}}) == ("public", "no-network")
    assert nets({"verifier": {"network_mode": "public"}}) == ("no-network", "public")
    separate = {"environment": {"network_mode": "public"}, "verifier": {"environment": {"network_mode": "no-network"}}}
    assert nets(separate) == ("public", "no-network")  # the separate verifier's own baseline
    allow = TaskConfig.model_validate({"environment": {"network_mode": "allowlist", "allowed_hosts": ["pypi.org"]}})
    assert allow.agent_network() == PhaseNetwork("allowlist", ("pypi.org",))


@pytest.mark.parametrize(("data", "named"), [
    ({"environment": {"allowed_hosts": ["pypi.org"]}}, 'allowed_hosts is only read with network_mode = "allowlist"'),
    ({"environment": {"os": "Windows"}}, 'os = "windows" is not supported: swerl runs Linux containers only'),
    ({"verifier": {"environment_mode": "shared", "environment": {}}}, 'environment_mode = "shared" contradicts'),
    ({"verifier": {"environment_mode": "separate", "same_container": True}}, "same_container = true contradicts"),
    ({"artifacts": ["app"]}, "must be an absolute path"),
    ({"artifacts": [{"source": "/logs/verifier"}]}, "is not a work product"),
    ({"artifacts": [{"source": "/app", "service": "db"}]}, "compose services are not supported"),
    ({"version": "1.0", "schema_version": "1.3"}, "disagree; keep one"),
    ({"environment": {"memory": "lots"}}, 'is not a size like "512M"'),
])
def test_what_swerl_cannot_run_is_refused_naming_the_key(data: dict, named: str):
    with pytest.raises(ValidationError, match=named):
        TaskConfig.model_validate(data)


def test_a_multi_step_task_is_refused_in_one_line():
    with pytest.raises(MalformedTask) as err:
        load_task(HARBOR13 / "multi-step")
    assert "\n" not in str(err.value) and err.value.file.endswith("multi-step/task.toml")
    assert "multi-step tasks ([[steps]]) are not supported: swerl runs one instruction and one verification" in err.value.reason


def test_artifacts_under_logs_artifacts_are_allowed_and_both_spellings_are_joined():
    config = TaskConfig.model_validate({"artifacts": ["/logs/artifacts/a.json", "/app/"],
                                        "verifier": {"artifacts": ["/app", "/srv"]}})
    assert config.work_product == ["/logs/artifacts/a.json", "/app", "/srv"]


def test_newer_schema_keys_are_named_with_what_swerl_does_instead():
    notes = task_notes(load_task(HARBOR13 / "newer-schema"))
    assert (notes.schema_version, notes.newer_schema, notes.verification) == ("1.4", True, "clean_room")
    found = {n.key: n.instead for n in notes.unsupported}
    assert set(found) == {"environment.mcp_servers", "environment.skills_dir", "agent.user", "artifacts.destination",
                          "artifacts.exclude", "verifier.future_verifier_knob", "verifier.continuous"}
    assert found["verifier.continuous"] == UNKNOWN and "bash tool" in found["environment.mcp_servers"]
    config = load_task(HARBOR13 / "newer-schema").config
    assert (config.environment.memory_mb, config.environment.workdir) == (512, "/app")
