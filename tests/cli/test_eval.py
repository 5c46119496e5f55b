"""``swerl eval``'s flags become an ``EvalConfig``: ``--batch-size`` reaches the batching backends
and is not passed to vLLM, which batches continuously (its config refuses the field); ``--lora``
reaches both, and a folder that is no peft adapter is refused before anything runs."""

from __future__ import annotations

import inspect
from pathlib import Path

from swerl.cli.eval import _eval_config, eval_cmd


def flags(**given) -> dict:
    """Every ``eval_cmd`` parameter at its default, then ``given``."""
    p = {name: param.default for name, param in inspect.signature(eval_cmd).parameters.items()}
    return {**p, "tasks": Path("tasks"), "engine": p["engine"] or [], **given}


def test_batch_size_reaches_hf_and_not_vllm():
    assert _eval_config(flags(backend="hf", batch_size=24)).inference.max_batch_size == 24
    vllm = _eval_config(flags(backend="vllm", batch_size=24, model="/models/m")).inference
    assert vllm.backend == "vllm" and "max_batch_size" not in type(vllm).model_fields


def test_a_flag_the_backend_does_not_read_is_refused_naming_its_field():
    import pytest

    from swerl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"swerl eval: inference.num_threads: Extra inputs are not permitted"):
        _eval_config(flags(backend="vllm", model="/models/m", threads=2))
    with pytest.raises(ConfigError, match=r"swerl eval: inference.tokenizer: Extra inputs are not permitted"):
        _eval_config(flags(backend="hf", tokenizer="/models/t"))


def test_lora_reaches_hf_and_vllm_and_a_folder_without_an_adapter_is_refused(tmp_path):
    from typer.testing import CliRunner

    from swerl.cli import app
    from swerl.errors import ConfigError

    assert _eval_config(flags(lora=tmp_path)).inference.lora_adapter == str(tmp_path)
    vllm = _eval_config(flags(backend="vllm", lora=tmp_path, model="/models/m")).inference
    assert vllm.lora_adapter == str(tmp_path)
    (tmp_path / "tasks").mkdir()
    result = CliRunner().invoke(app, ["eval", str(tmp_path / "tasks"), "--lora", str(tmp_path)])
    assert isinstance(result.exception, ConfigError) and result.exception.exit_code == 2
    assert "no adapter_config.json" in str(result.exception)
