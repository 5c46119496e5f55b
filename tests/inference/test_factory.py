"""make_backend and the generator configs: each kind builds the right backend, bad options fail at load
naming the field."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pydantic import ValidationError

from swerl.errors import ConfigError, EnvironmentProblem
from swerl.inference.backends.batcher import AsyncBatcher
from swerl.inference.config import HFGenerator, OpenAIGenerator, VLLMGenerator, inference_config
from swerl.inference.factory import make_backend, make_batcher
from swerl.inference.backends.hf import HFBackend
from swerl.inference.backends.openai_backend import OpenAIBackend


@pytest.fixture
def tiny_folder(tmp_path: Path, tiny_model, tiny_tokenizer) -> Path:
    tiny_model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    return tmp_path


def test_hf_backend_from_folder(tiny_folder: Path) -> None:
    backend = make_backend("hf", str(tiny_folder), dtype="float32", seed=3)
    assert isinstance(backend, HFBackend) and backend.tokenizer.chat_template


def test_openai_backend_takes_tokenizer_from_local_path(tiny_folder: Path) -> None:
    backend = make_backend("openai", None, base_url="http://127.0.0.1:9/v1", tokenizer=str(tiny_folder))
    assert isinstance(backend, OpenAIBackend) and backend.tokenizer is not None and backend.model == "default"


def test_make_batcher_uses_config_sizes(tiny_folder: Path) -> None:
    config = HFGenerator(model=str(tiny_folder), max_batch_size=3, batch_wait_s=0.2)
    batcher = make_batcher(make_backend("hf", str(tiny_folder)), config)
    assert isinstance(batcher, AsyncBatcher) and (batcher.max_batch_size, batcher.max_wait_s) == (3, 0.2)


def test_unknown_option_rejected() -> None:
    with pytest.raises(ValidationError, match="extra"):
        inference_config(backend="hf", max_batch=4)


@pytest.mark.parametrize(
    "fields,match",
    [
        ({"backend": "openai"}, r"openai\.base_url\n  Field required"),
        ({"backend": "vllm", "dtype": "float16"}, r"vllm\.dtype\n  Input should be 'float32' or 'bfloat16'"),
        ({"backend": "tgi"}, "backend must be hf, vllm or openai"),
    ],
)
def test_contradictory_fields_rejected(fields: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        inference_config(**fields)


def test_the_backend_picks_the_model_hf_when_left_out() -> None:
    assert type(inference_config()) is HFGenerator
    assert type(inference_config(backend="vllm")) is VLLMGenerator
    assert type(inference_config(backend="openai", base_url="http://x/v1")) is OpenAIGenerator


def test_dtype_defaults_per_backend() -> None:
    assert HFGenerator().resolved_dtype() == "float32"
    assert VLLMGenerator().resolved_dtype() == "bfloat16"


def test_missing_model_path_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        make_backend("hf", str(tmp_path / "missing"))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_kind_without_vllm_is_environment_problem(tiny_folder: Path) -> None:
    with pytest.raises(EnvironmentProblem, match="vllm"):
        make_backend("vllm", str(tiny_folder))


def test_num_threads_applied_for_hf(tiny_folder: Path) -> None:
    import torch

    before = torch.get_num_threads()
    try:
        make_backend("hf", str(tiny_folder), num_threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
