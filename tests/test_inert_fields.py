"""Every accepted config field works or is refused: a field that the chosen backend, protocol,
policy or command never reads fails at load with one line naming it; a whole dumped config
(every field at its default) still loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from swerl.agent.config import AgentConfig
from swerl.errors import ConfigError
from swerl.inference.config import HFGenerator, OpenAIGenerator, VLLMGenerator, inference_config
from swerl.tasks.task_folder import TaskConfig
from swerl.trainer.config import TrainConfig, load_train_config

DEMO_YAML = Path(__file__).resolve().parents[1] / "examples" / "humaneval-smollm2-cpu.yaml"


@pytest.mark.parametrize(("fields", "named"), [
    ({"backend": "hf", "max_model_len": 8192}, "hf.max_model_len"),  # even at its default: not an hf field
    ({"backend": "hf", "weight_sync": "nccl"}, "hf.weight_sync"),
    ({"backend": "vllm", "device": "cuda:0"}, "vllm.device"),
    ({"backend": "vllm", "max_batch_size": 16}, "vllm.max_batch_size"),  # continuous batching: no batcher
    ({"backend": "vllm", "tokenizer": "/models/x"}, "vllm.tokenizer"),
    ({"backend": "openai", "base_url": "http://x/v1", "lora_adapter": "/a"}, "openai.lora_adapter"),
])
def test_a_field_of_another_backend_is_refused_naming_it(fields, named):
    """Each backend's model holds only its own fields: another backend's is pydantic's own
    extra-field error, at that field."""
    with pytest.raises(ValidationError, match=rf"{named}\n  Extra inputs are not permitted"):
        inference_config(**fields)


def test_a_vllm_server_field_needs_servers():
    with pytest.raises(ValidationError, match="num_servers is only read with vllm_mode=servers"):
        VLLMGenerator(num_servers=2)
    assert VLLMGenerator(vllm_mode="servers", num_servers=2).num_engines == 2


@pytest.mark.parametrize("config", [HFGenerator(device="cuda:0"), VLLMGenerator(vllm_mode="servers", num_servers=2),
                                    OpenAIGenerator(base_url="http://x/v1")], ids=["hf", "vllm", "openai"])
def test_a_dumped_generator_config_loads_again(config):
    assert inference_config(**config.model_dump()) == config  # every field given, the backend's own


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


def test_under_auto_each_backend_has_its_own_section():
    """generator.backend: auto holds one section per candidate, each validated as its backend's
    config on every machine; a backend's field outside its section is refused naming the section;
    --set generator.backend over the file's auto takes that backend's section (a file that writes a
    backend with a candidate section is refused)."""
    cfg = load_train_config(DEMO_YAML, ["generator.vllm.max_model_len=2048", "generator.vllm.dtype=bfloat16"])
    assert (cfg.generator.hf.num_threads, cfg.generator.vllm.max_model_len) == (1, 2048)
    with pytest.raises(ConfigError, match=r"--set generator.max_model_len=2048: generator.max_model_len: a field of "
                                          r"backend vllm: under backend auto it goes in generator.vllm$"):
        load_train_config(DEMO_YAML, ["generator.max_model_len=2048"])
    with pytest.raises(ConfigError, match=r"generator.vllm.num_threads: not a field of backend 'vllm' \(a field of hf\)"):
        load_train_config(DEMO_YAML, ["generator.vllm.num_threads=1"])
    with pytest.raises(ConfigError, match="generator.hf.device would be ignored by swerl train"):
        load_train_config(DEMO_YAML, ["generator.hf.device=cuda:0"])
    forced = load_train_config(DEMO_YAML, ["generator.backend=vllm", "generator.vllm.max_model_len=2048"])
    assert isinstance(forced.generator, VLLMGenerator) and forced.generator.max_model_len == 2048
    assert load_train_config(DEMO_YAML, ["generator.backend=hf"]).generator.max_batch_size == 16  # the hf section
    with pytest.raises(ValidationError, match=r"generator\.hf\.vllm\n  Extra inputs are not permitted"):
        TrainConfig.model_validate({"data": {"tasks": "x"}, "generator": {"backend": "hf", "vllm": {}}})  # written so

