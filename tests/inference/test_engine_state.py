"""The sleep/wake state machine of an in-process vLLM engine (``inference/engines/engine_state.py``): a
level-2 sleep discards the weights, so the KV cache may wake only after every weight is loaded
again; level 1 wakes directly; invalid transitions are refused. The real engine goes through
this cycle in ``test_vllm_engines.py`` (sleep, refused requests, the sync's reload wakes it)."""

from __future__ import annotations

import pytest

from swerl.errors import InferenceError
from swerl.inference.engines.engine_state import EngineState


def test_state_machine_level2_needs_full_load_before_kv_and_generation() -> None:
    asleep = EngineState().sleep(2)
    assert asleep.name == "asleep_l2_weights_invalid" and not asleep.can_generate
    with pytest.raises(InferenceError, match="discarded weights"):
        asleep.wake(["weights", "kv_cache"])
    weights = asleep.wake(["weights"])
    assert weights.name == "waking" and not weights.can_generate
    awake = weights.loaded_all_weights().wake(["kv_cache"])
    assert awake.name == "awake" and awake.can_generate


def test_state_machine_level1_wakes_directly() -> None:
    asleep = EngineState().sleep(1)
    assert asleep.name == "asleep_l1"
    assert asleep.wake(["weights", "kv_cache"]).can_generate


def test_state_machine_refuses_invalid_transitions() -> None:
    with pytest.raises(InferenceError, match="level must be 1 or 2"):
        EngineState().sleep(3)
    with pytest.raises(InferenceError, match="not awake"):
        EngineState().sleep(1).sleep(1)
    with pytest.raises(InferenceError, match="wake tags=\\['weights'\\] first"):
        EngineState().sleep(2).loaded_all_weights()
    with pytest.raises(InferenceError, match="unknown wake tags"):
        EngineState().wake(["everything"])
