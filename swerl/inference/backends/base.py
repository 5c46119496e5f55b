"""The contract every generation backend honours: token ids in; token ids, sampling
log-probs, a finish reason and the weight version out (``docs/inference.md``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from concurrent.futures import Future
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
        support: (T,) the kept set each token was drawn from under top-k / top-p (its ids, most
            likely first, the sampled id among them: ``swerl.rl.support``); None when sampling did
            not truncate (the whole vocabulary) or the backend cannot return it.
    """

    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: Literal["stop", "length"]
    weight_version: int = 0
    support: list[list[int]] | None = None


@runtime_checkable
class GenerationBackend(Protocol):
    """A batched, synchronous generator. Async callers go through ``backends/batcher.py``."""

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt (prompt = list of token ids); same order as ``prompts``."""
        ...


class ContinuousBackend(ABC):
    """A backend that schedules requests itself (vLLM's continuous batching): each request is
    submitted the moment an episode needs its turn, and its future resolves when THAT request
    finishes. No batch barrier: a short turn never waits for a long one, and the engine decodes
    every request in flight (up to its ``max_num_seqs``) in each step. Async callers go through
    ``batcher.RequestStream``; :meth:`generate` is the blocking form.
    """

    can_pause: bool = False
    """Whether :meth:`pause` / :meth:`resume` freeze requests in flight (vLLM 0.32's
    ``pause_generation(mode="keep")``, or the in-process engine not stepped); False: a weight update
    waits until no request is in flight."""

    def pause(self) -> None:
        """Freeze every request in flight where it is (tokens so far kept) and schedule none until
        :meth:`resume`, so that weights can be swapped under them. Only when ``can_pause``."""
        raise NotImplementedError(f"{type(self).__name__} cannot pause its requests")

    def resume(self) -> None:
        """Schedule again after :meth:`pause`: frozen requests continue, with the weights now loaded."""
        raise NotImplementedError(f"{type(self).__name__} cannot pause its requests")

    @abstractmethod
    def submit(self, prompt: list[int], sampling: SamplingParams) -> Future[Generation]:
        """Queue one request (prompt = token ids; ``sampling.seed`` is its seed); returns at once.

        The future raises ``InferenceError`` (or the engine's error) when the request fails.
        """

    def generate(self, prompts: list[list[int]], sampling: SamplingParams,
                 seeds: list[int | None] | None = None) -> list[Generation]:
        """Submit every prompt (with ``seeds[i]`` overriding ``sampling.seed``), wait for all; prompt order."""
        row_seeds = seeds if seeds is not None else [sampling.seed] * len(prompts)
        futures = [self.submit(list(prompt), sampling if seed == sampling.seed else
                               sampling.model_copy(update={"seed": seed}))
                   for prompt, seed in zip(prompts, row_seeds, strict=True)]
        return [future.result() for future in futures]
