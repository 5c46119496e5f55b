"""Where a vLLM engine's weights and KV cache are (vLLM sleep mode): a pure state machine that the
in-process backend keeps beside the engine, so that a sleeping engine is never asked to generate
and the KV cache is never woken over discarded weights (vLLM's "gibberish" failure after a level-2
sleep until every weight is rewritten). On GPU the engine frees that memory; on CPU vLLM's sleep
is a no-op but the engine's scheduler still pauses until it is fully awake, and so does this."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from swerl.errors import InferenceError


@dataclass(frozen=True)
class EngineState:
    """Where the engine's weights and KV cache are (vLLM sleep mode, GPU only); transitions return new states.

    Attributes:
        weights_on_gpu: weight pool allocated on the GPU.
        weights_valid: the weights hold the policy (False after level-2 sleep until a full load).
        kv_on_gpu: KV cache allocated.
    """

    weights_on_gpu: bool = True
    weights_valid: bool = True
    kv_on_gpu: bool = True

    @property
    def name(self) -> str:
        """``awake``, ``asleep_l1``, ``asleep_l2_weights_invalid`` or ``waking`` (part woken)."""
        if self.weights_on_gpu and self.weights_valid and self.kv_on_gpu:
            return "awake"
        if not self.weights_on_gpu and not self.kv_on_gpu:
            return "asleep_l1" if self.weights_valid else "asleep_l2_weights_invalid"
        return "waking"

    @property
    def can_generate(self) -> bool:
        return self.name == "awake"

    def sleep(self, level: int) -> EngineState:
        """Level 1 offloads weights to CPU (kept valid); level 2 discards them. KV is dropped."""
        if level not in (1, 2):
            raise InferenceError(f"vLLM sleep level must be 1 or 2, got {level}")
        if self.name != "awake":
            raise InferenceError(f"cannot sleep: engine is {self.name}, not awake")
        return EngineState(weights_on_gpu=False, weights_valid=level == 1, kv_on_gpu=False)

    def wake(self, tags: Iterable[str]) -> EngineState:
        """Wake ``weights`` and/or ``kv_cache``; waking the KV needs valid weights first."""
        tags = set(tags)
        if unknown := tags - {"weights", "kv_cache"}:
            raise InferenceError(f"unknown wake tags {sorted(unknown)}; use 'weights' and/or 'kv_cache'")
        state = self
        if "weights" in tags:
            state = replace(state, weights_on_gpu=True)
        if "kv_cache" in tags:
            if not state.weights_valid:
                raise InferenceError("refusing to wake the KV cache over discarded weights; load all weights first")
            state = replace(state, kv_on_gpu=True)
        return state

    def loaded_all_weights(self) -> EngineState:
        """A full weight load makes the weights valid again; needs the weight pool awake."""
        if not self.weights_on_gpu:
            raise InferenceError("cannot load weights while they sleep; wake tags=['weights'] first")
        return replace(self, weights_valid=True)
