"""Shared pytest fixtures: the one tiny model of the suite, and the session's vLLM engine.

``build_tiny_llama`` is the only place a test model is built (a 2-layer Llama, hidden size 32,
built from a config: no hub, random weights drawn from ``seed``); the stage folders' helpers
(``trainer/_support.py``, ``rl/_tiny.py``, ``inference/conftest.py``, ``agent/conftest.py``) call
it with their vocabulary and special tokens.

The vLLM fixtures (``model_path``, ``trainer_model``, ``engine``, ``servers``) are shared so that
the engine tests and the pipeline tests use ONE in-process engine and ONE pool of two servers (a
start costs ~20-40 s on 2 cores); only tests marked ``vllm`` use them. Both are built for LoRA
adapters too (the LoRA tests load adapters into them). A test that reloads their weights puts the
default model's back (version 0) before it ends; one that loads an adapter unloads it. The servers are processes that
idle at ~16% CPU each: their users run back to back (``pytest_collection_modifyitems``) and the
pool stops after the last of them (``pytest_runtest_teardown``), not at the end of the session.
"""

from __future__ import annotations

import pytest

from tiny_llama import TINY_LLAMA, build_tiny_llama  # noqa: F401 - re-exported for the stage helpers


@pytest.fixture
def tiny_llama():  # noqa: ANN201
    """The builder as a fixture: ``tiny_llama(vocab_size, seed=0, **config)``."""
    return build_tiny_llama


@pytest.fixture(scope="session")
def model_path():  # noqa: ANN201
    """The default model's folder (SmolLM2-135M-Instruct, tied embeddings)."""
    from swerl.inference.model_files import resolve_model

    return resolve_model(None)


@pytest.fixture(scope="session")
def trainer_model(model_path):  # noqa: ANN201
    """The default model in fp32 on CPU, eval mode (the trainer's side of the parity probe)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def engine(model_path):  # noqa: ANN201
    """One in-process vLLM engine (bf16) on the default model for the whole session; sleep mode on
    (read on GPU only: on CPU vLLM's sleep is a no-op) so the sleep/wake cycle runs on either; built
    for LoRA adapters (rank <= LORA_RANK) so the adapter tests need no engine of their own."""
    from swerl.inference.engines.vllm_backend import VLLMBackend
    from vllm_support import LORA_RANK, engine_config

    backend = VLLMBackend(engine_config(enable_sleep_mode=True), str(model_path), max_lora_rank=LORA_RANK)
    yield backend
    backend.close()


class _ServerPool:
    """The pool behind ``servers``: started by the first test that asks for it, stopped after the last."""

    pool = None

    @classmethod
    def get(cls, model_path, tmp_path_factory):  # noqa: ANN001, ANN206 - EnginePool, imported lazily
        if cls.pool is None:
            from swerl.inference.factory import build_vllm
            from vllm_support import LORA_RANK, engine_config

            cls.pool = build_vllm(engine_config(vllm_mode="servers", num_servers=2, cpu_cores=["0", "1"]),
                                  str(model_path), tmp_path_factory.mktemp("vllm-servers"), max_lora_rank=LORA_RANK)
        return cls.pool

    @classmethod
    def stop(cls) -> None:
        pool, cls.pool = cls.pool, None
        if pool is not None:
            pool.close()


@pytest.fixture
def servers(model_path, tmp_path_factory):  # noqa: ANN201
    """Two vLLM OpenAI servers (bf16, LoRA on) that swerl starts, on cores 0 and 1, behind one
    ``EnginePool``; shared by every test that names this fixture, and stopped after the last of them."""
    return _ServerPool.get(model_path, tmp_path_factory)


def _uses_servers(item) -> bool:  # noqa: ANN001 - pytest.Item or None
    return item is not None and "servers" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items) -> None:  # noqa: ANN001 - list[pytest.Item]
    """The tests that use ``servers`` run back to back, where the first of them was collected."""
    users = [item for item in items if _uses_servers(item)]
    if users:
        first = items.index(users[0])
        items[first:] = users + [item for item in items[first:] if not _uses_servers(item)]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem) -> None:  # noqa: ANN001 - pytest.Item, pytest.Item | None
    """Stop the servers after their last user (the next test does not use them, or there is none)."""
    if _uses_servers(item) and not _uses_servers(nextitem):
        _ServerPool.stop()


def pytest_sessionfinish() -> None:
    """An interrupted session (``-x``, Ctrl-C) stops the servers too."""
    _ServerPool.stop()
