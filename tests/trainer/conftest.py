"""Fixtures of the trainer tests; the builders live in _support.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._support import save_tiny_model_dir


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """An HF folder with the tiny tokenizer and model (built once per session)."""
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-model"))
