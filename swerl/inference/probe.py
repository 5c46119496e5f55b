"""Parity probe between a generation backend and the trainer's model (``docs/inference.md``, "The parity probe").

After each weight sync, sample a fixed prompt with the backend and re-score the sampled ids with
the trainer's module: the gap between the backend's mu and the trainer's processed log-probs
should be ~0 in fp32 (HF) and small in bf16 (vLLM). A large gap means stale or wrong weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from swerl import metric_keys
from swerl.errors import InferenceError
from swerl.inference.backends.base import Generation, GenerationBackend, SamplingParams
from swerl.inference.backends.sampling import processed_logprobs


def rescore(model: nn.Module, prompt: list[int], generation: Generation, sampling: SamplingParams,
            device: torch.device | None = None) -> torch.Tensor:
    """Trainer-side processed log-probs of the generated ids.

    Args:
        model: a causal LM returning ``.logits`` of shape (1, P+T, V).
        prompt: (P,) prompt ids. generation: its (T,) sampled ids (T may be 0: the prompt is still
            forwarded, so that sharded models run the same collectives on every rank).
        sampling: the settings the ids were sampled with (temperature, top-k, top-p).
        device: where the model computes; None = its first parameter's device (wrong for FSDP
            shards offloaded to the host, which compute on the GPU: pass the rank's device).

    Returns:
        (T,) float32 log-probs of each sampled id under the processed distribution.
    """
    device = device if device is not None else next(model.parameters()).device
    ids = torch.tensor([prompt + generation.token_ids], device=device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    if not generation.token_ids:
        return torch.zeros(0)
    steps = processed_logprobs(logits, sampling.temperature, sampling.top_k, sampling.top_p)
    return steps.gather(-1, ids[0, len(prompt) :, None])[:, 0].float().cpu()


def probe_sampling(temperature: float, max_new_tokens: int, seed: int = 1234) -> SamplingParams:
    """The probe's sampling: the run's temperature with top-p = 1 and top-k off, so the engine's
    processed log-probs equal the trainer's ``log_softmax(logits / T)`` exactly (up to numerics)."""
    return SamplingParams(temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens, seed=seed)


def sample_engines(engines: Sequence[GenerationBackend], prompt: list[int],
                   sampling: SamplingParams) -> list[Generation | str]:
    """The probe's sample from each of ``engines`` (a rank's owned engines; may be empty); an engine
    that fails (``InferenceError``) or returns no log-probs gives its reason instead."""
    out: list[Generation | str] = []
    for engine in engines:
        try:
            generation = engine.generate([prompt], sampling)[0]
        except InferenceError as err:
            out.append(f"logprob probe: {err}")
            continue
        out.append(generation if generation.logprobs is not None else "logprob probe: the backend returned no log-probs")
    return out


def empty_generation() -> Generation:
    """No token: what a failed engine's sample is re-scored as (the forward still runs)."""
    return Generation(token_ids=[], logprobs=[], finish_reason="stop")


def gap_metrics(samples: list[Generation | str], rescored: list[torch.Tensor],
                max_mean_abs_diff: float | None = None) -> dict[str, float]:
    """The gap between each engine's mu and the trainer's re-scored log-probs (same order).

    Returns: see :func:`logprob_gap`. Raises: InferenceError for the first failed engine, or an
        engine whose mean gap exceeds ``max_mean_abs_diff``.
    """
    diffs = []
    for index, (sample, trainer) in enumerate(zip(samples, rescored, strict=True)):
        if isinstance(sample, str):
            raise InferenceError(f"engine {index}: {sample}")
        if not sample.token_ids:
            continue
        diff = (torch.tensor(sample.logprobs) - trainer).abs()
        mean = diff.mean().item()
        if max_mean_abs_diff is not None and mean > max_mean_abs_diff:
            raise InferenceError(
                f"logprob probe: engine {index} (weight version {sample.weight_version}) differs from the trainer "
                f"by mean |mu - logp| = {mean:.4f} nats > limit {max_mean_abs_diff}: its weights are stale or "
                "half-applied (a failed sync); the run stops here. Raise generator.logprob_diff_limit only if this "
                "gap is expected (e.g. a bf16 engine vs an fp32 trainer)"
            )
        diffs.append(diff)
    if not diffs:
        return {metric_keys.INFERENCE_LOGPROB_DIFF_MEAN: 0.0, metric_keys.INFERENCE_LOGPROB_DIFF_MAX: 0.0,
                metric_keys.INFERENCE_PROBE_TOKENS: 0.0}
    every = torch.cat(diffs)
    return {
        metric_keys.INFERENCE_LOGPROB_DIFF_MEAN: every.mean().item(),
        metric_keys.INFERENCE_LOGPROB_DIFF_MAX: every.max().item(),
        metric_keys.INFERENCE_PROBE_TOKENS: float(every.numel()),
    }


def logprob_gap(
    engines: Sequence[GenerationBackend],
    model: nn.Module,
    prompt: list[int],
    sampling: SamplingParams,
    max_mean_abs_diff: float | None = None,
    device: torch.device | None = None,
) -> dict[str, float]:
    """Sample ``prompt`` on each of ``engines`` and compare its mu with ``model``'s log-probs.

    Args:
        engines: the engines to probe, each on its own (a rank's owned engines; may be empty).
        max_mean_abs_diff: the limit on any engine's mean |mu - logp|, nats; None = no check.
        device: where ``model`` computes (see :func:`rescore`).

    Returns:
        ``{"inference/logprob_diff_mean": mean |mu - logp| over all probe tokens,
        "inference/logprob_diff_max": max |mu - logp|, "inference/probe_tokens": T}`` (nats, tokens).

    Raises:
        InferenceError: an engine failed or returned no log-probs, or its mean gap exceeds ``max_mean_abs_diff``.
    """
    samples = sample_engines(engines, prompt, sampling)
    rescored = [rescore(model, prompt, s if not isinstance(s, str) else empty_generation(), sampling, device)
                for s in samples]
    return gap_metrics(samples, rescored, max_mean_abs_diff)
