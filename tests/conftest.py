"""Shared pytest fixtures: the one tiny model of the suite.

``build_tiny_llama`` is the only place a test model is built (a 2-layer Llama, hidden size 32,
built from a config: no hub, random weights drawn from ``seed``); the stage folders' helpers
(``trainer/_support.py``, ``rl/_tiny.py``, ``inference/conftest.py``, ``agent/conftest.py``) call
it with their vocabulary and special tokens.
"""

from __future__ import annotations

import pytest

from tiny_llama import TINY_LLAMA, build_tiny_llama  # noqa: F401 - re-exported for the stage helpers


@pytest.fixture
def tiny_llama():  # noqa: ANN201
    """The builder as a fixture: ``tiny_llama(vocab_size, seed=0, **config)``."""
    return build_tiny_llama
