"""Every accepted config field works or is refused: a field that the chosen backend, protocol,
policy or command never reads fails at load with one line naming it; a whole dumped config
(every field at its default) still loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from swerl.agent.config import AgentConfig
from swerl.errors import ConfigError
from swerl.inference.config import InferenceConfig
from swerl.tasks.task_folder import TaskConfig
from swerl.trainer.setup.config import TrainConfig, load_train_config

DEMO_YAML = Path(__file__).resolve().parents[1] / "examples" / "humaneval-smollm2-cpu.yaml"


@pytest.mark.parametrize(("fields", "named"), [
    ({"backend": "hf", "max_model_len": 4096}, "inference.max_model_len is only read by backend 'vllm'"),
    ({"backend": "hf", "weight_sync": "nccl"}, "inference.weight_sync is only read by backend 'vllm'"),
    ({"backend": "vllm", "device": "cuda:0"}, "inference.device is only read by backend 'hf'"),
    ({"backend": "vllm", "tokenizer": "/models/x"}, "inference.tokenizer is only read by backend 'openai'"),
    ({"backend": "vllm", "num_servers": 2}, "inference.num_servers is only read with vllm_mode=servers"),
])
def test_a_backend_field_the_backend_does_not_read_is_refused(fields, named):
    with pytest.raises(ValidationError, match=named):
        InferenceConfig(**fields)


def test_backend_fields_at_their_defaults_or_read_by_the_backend_pass():
    InferenceConfig(backend="hf", max_model_len=8192, device="cuda:0")  # 8192 is the default
    InferenceConfig(backend="vllm", vllm_mode="servers", num_servers=2, max_model_len=1024)
    dumped = InferenceConfig(backend="hf").model_dump()  # every field given, all at their defaults
    assert InferenceConfig.model_validate(dumped).backend == "hf"


@pytest.mark.parametrize(("field", "refused_with", "read_with", "named"), [
    ({"reasoning_split": True}, {"protocol": "single-turn"}, {"protocol": "terminus-json"},
     "reasoning_split is only read by protocol 'terminus-json'"),
    ({"solution_path": "/app/x.py"}, {"protocol": "tool-call"}, {"protocol": "single-turn"},
     "solution_path is only read by protocol 'single-turn'"),
    ({"output_budget_bytes": 4096}, {"protocol": "single-turn"}, {"protocol": "tool-call"},
     "output_budget_bytes is only read by the multi-turn protocols"),
    ({"proactive_summarization_threshold_tokens": 100}, {}, {"on_context_full": "summarize"},
     "only read with on_context_full=summarize"),
])
def test_an_agent_field_the_protocol_does_not_read_is_refused(field, refused_with, read_with, named):
    with pytest.raises(ValidationError, match=named):
        AgentConfig(**field, **refused_with)
    assert AgentConfig(**field, **read_with).model_dump(include=set(field)) == field


@pytest.mark.parametrize(("override", "why"), [
    ("generator.device=cuda:0", "the generator runs on model.device"),
    ("generator.dtype=bfloat16", "samples with the trained module itself"),
])
def test_a_generator_field_that_train_ignores_is_refused_naming_the_flag(override, why):
    with pytest.raises(ConfigError) as err:
        load_train_config(DEMO_YAML, ["generator.backend=hf", override])
    message = str(err.value)
    assert message.startswith(f"--set {override}:") and why in message and "\n" not in message


def test_a_dumped_train_config_loads_again():
    cfg = load_train_config(DEMO_YAML)
    assert TrainConfig.model_validate(cfg.model_dump(mode="json")) == cfg


def test_a_task_asking_for_gpus_is_refused():
    with pytest.raises(ValidationError, match="gpus = 1 is not supported: swerl runs CPU sandboxes only"):
        TaskConfig.model_validate({"environment": {"gpus": 1}})
    assert TaskConfig.model_validate({"environment": {"gpus": 0}}).environment.gpus == 0


def test_under_auto_the_fields_of_either_backend_wait_for_the_choice():
    """generator.backend: auto accepts what hf alone reads (num_threads) and what vllm alone reads
    (max_model_len, dtype); an explicit backend refuses the other's fields, and auto still
    refuses fields that neither choice reads."""
    both = ["generator.num_threads=1", "generator.max_model_len=2048", "generator.dtype=bfloat16"]
    cfg = load_train_config(DEMO_YAML, ["generator.backend=auto", *both])
    assert (cfg.generator.num_threads, cfg.generator.max_model_len) == (1, 2048)
    with pytest.raises(ConfigError, match="max_batch_size, batch_wait_s not read by backend 'vllm'.*max_batch_size=8, batch_wait_s=0.05"):
        load_train_config(DEMO_YAML, ["generator.backend=vllm", *both])  # the demo's batcher fields
    batcher_defaults = ["generator.max_batch_size=8", "generator.batch_wait_s=0.05"]
    with pytest.raises(ConfigError, match="generator.num_threads would be ignored"):
        load_train_config(DEMO_YAML, ["generator.backend=vllm", *batcher_defaults, *both])
    with pytest.raises(ConfigError, match="only read by backend 'vllm'"):
        load_train_config(DEMO_YAML, ["generator.backend=hf", *both])
    with pytest.raises(ConfigError, match="generator.device would be ignored"):
        load_train_config(DEMO_YAML, ["generator.backend=auto", "generator.device=cuda:0"])
    with pytest.raises(ConfigError, match="only read by backend 'openai'"):
        load_train_config(DEMO_YAML, ["generator.backend=auto", "generator.tokenizer=/models/x"])
