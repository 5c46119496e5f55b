"""The contract every generation backend honours: token ids in; token ids, sampling
log-probs, a finish reason and the weight version out (``docs/inference.md``)."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class SamplingParams(BaseModel):
    """Sampling settings of one generation call; every field is explicit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, ge=0.0, description="Softmax temperature; 0 = greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus mass kept; 1.0 = off.")
    top_k: int = Field(0, ge=0, description="Keep the k most likely tokens; 0 = off.")
    max_new_tokens: int = Field(512, ge=1, description="Generation budget per call, tokens.")
    seed: int | None = Field(None, description="Per-call sampling seed; None = backend RNG.")
    stop: list[str] = Field(default_factory=list, description="Stop strings (matched on decoded text).")
    stop_token_ids: list[int] = Field(default_factory=list, description="Token ids that end the turn.")


class Generation(BaseModel):
    """One sampled continuation.

    Attributes:
        token_ids: (T,) generated ids only, including the stop/EOS id that ended the turn.
        logprobs: (T,) float log-prob of each sampled token under the distribution actually
            sampled from (temperature, top-k/top-p applied); None when the backend cannot
            return them (counted in ``tis/rows_without_logprobs``).
        finish_reason: ``stop`` (EOS / stop token / stop string) or ``length`` (budget hit).
        weight_version: policy version that produced it (bumped by ``update_weights``).
    """

    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: Literal["stop", "length"]
    weight_version: int = 0


@runtime_checkable
class GenerationBackend(Protocol):
    """A batched, synchronous generator. Async callers go through ``inference.batcher``."""

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt (prompt = list of token ids); same order as ``prompts``."""
        ...
