"""Parity probe between a generation backend and the trainer's model (vllm.md "Recommended design").

After each weight sync, sample a fixed prompt with the backend and re-score the sampled ids with
the trainer's module: the gap between the backend's mu and the trainer's processed log-probs
should be ~0 in fp32 (HF) and small in bf16 (vLLM). A large gap means stale or wrong weights.
"""

from __future__ import annotations

import torch
from torch import nn

from swerl.errors import InferenceError
from swerl.inference.base import Generation, GenerationBackend, SamplingParams
from swerl.inference.sampling import processed_logprobs


def rescore(model: nn.Module, prompt: list[int], generation: Generation, sampling: SamplingParams) -> torch.Tensor:
    """Trainer-side processed log-probs of the generated ids.

    Args:
        model: a causal LM returning ``.logits`` of shape (1, P+T, V).
        prompt: (P,) prompt ids. generation: its (T,) sampled ids.
        sampling: the settings the ids were sampled with (temperature, top-k, top-p).

    Returns:
        (T,) float32 log-probs of each sampled id under the processed distribution.
    """
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + generation.token_ids], device=device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    steps = processed_logprobs(logits, sampling.temperature, sampling.top_k, sampling.top_p)
    return steps.gather(-1, ids[0, len(prompt) :, None])[:, 0].float().cpu()


def logprob_gap(
    backend: GenerationBackend,
    model: nn.Module,
    prompt: list[int],
    sampling: SamplingParams,
    max_mean_abs_diff: float | None = None,
) -> dict[str, float]:
    """Sample ``prompt`` with ``backend`` and compare its mu with ``model``'s re-scored log-probs.

    Returns:
        ``{"inference/logp_diff_mean": mean |mu - logp|, "inference/logp_diff_max": max |...|,
        "inference/probe_tokens": T}`` (nats, tokens).

    Raises:
        InferenceError: the backend returned no log-probs, or the mean gap exceeds ``max_mean_abs_diff``.
    """
    generation = backend.generate([prompt], sampling)[0]
    if generation.logprobs is None:
        raise InferenceError("logprob probe: the backend returned no log-probs")
    if not generation.token_ids:
        return {"inference/logp_diff_mean": 0.0, "inference/logp_diff_max": 0.0, "inference/probe_tokens": 0.0}
    diff = (torch.tensor(generation.logprobs) - rescore(model, prompt, generation, sampling)).abs()
    metrics = {
        "inference/logp_diff_mean": diff.mean().item(),
        "inference/logp_diff_max": diff.max().item(),
        "inference/probe_tokens": float(diff.numel()),
    }
    if max_mean_abs_diff is not None and metrics["inference/logp_diff_mean"] > max_mean_abs_diff:
        raise InferenceError(
            f"logprob probe: mean |mu - logp| = {metrics['inference/logp_diff_mean']:.4f} nats exceeds "
            f"{max_mean_abs_diff}; the backend's weights differ from the trainer's (stale sync?)"
        )
    return metrics
