"""A tiny real causal LM and a ragged RL micro-batch, shared by the reduction/loss tests."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from swerl.rl.loss import LossInputs

VOCAB = 64
SEQ = 14  # tokens per padded row; per-token logprobs have SEQ - 1 positions

CORRECTIONS = {  # every rollout correction, with bounds that both keep and reject on ragged_batch()
    "token-truncate": None,  # use_tis
    "sequence-truncate": {"level": "sequence", "mode": "truncate", "high": 3.0},
    "token-mask": {"level": "token", "mode": "mask", "high": 2.0},
    "sequence-mask": {"level": "sequence", "mode": "mask", "high": 3.0},
    "geometric-mask": {"level": "geometric", "mode": "mask", "high": 1.5},
}
# Each correction once, each reduction and each KL estimator at least once (the weight multiplies
# per-token losses, so the reductions' own invariance, tested for all modes, carries over).
CORRECTION_CASES = [("token-truncate", "token_mean", "k3"), ("sequence-truncate", "sequence_mean", "k1"),
                    ("token-mask", "seq_mean_token_sum_norm", "k2"),
                    ("sequence-mask", "seq_mean_token_sum_norm_global", "k3"), ("geometric-mask", "sequence_mean", "k3")]


def correction_config(reduction: str, correction: str, kl_estimator: str, max_seq_len: int):
    """An AlgorithmConfig with one of CORRECTIONS and the KL term on (coef 0.5)."""
    from swerl.rl.config import AlgorithmConfig

    block = CORRECTIONS[correction]
    return AlgorithmConfig(loss_reduction=reduction, max_seq_len=max_seq_len, use_tis=block is None,
                           rollout_correction=block, use_kl_loss=True, kl_loss_coef=0.5, kl_estimator=kl_estimator)


def tiny_model(seed: int = 0) -> torch.nn.Module:
    """LlamaForCausalLM built from a config (no hub), fp32, deterministic weights."""
    from tiny_llama import build_tiny_llama

    return build_tiny_llama(VOCAB, seed, max_position_embeddings=64)


@dataclass
class Batch:
    input_ids: Tensor  # (B, SEQ) int64, right-padded
    loss_mask: Tensor  # (B, SEQ-1) bool, model-generated positions
    advantages: Tensor  # (B,) float32
    old_logprobs: Tensor  # (B, SEQ-1) float32
    rollout_logprobs: Tensor  # (B, SEQ-1) float32
    has_rollout_logprobs: Tensor  # (B,) bool
    ref_logprobs: Tensor  # (B, SEQ-1) float32, a reference policy's log-probs (KL term)

    def rows(self, idx) -> "Batch":
        return Batch(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))

    def loss_inputs(self, logprobs: Tensor, **fields) -> LossInputs:
        """The loss's view of these rows with log pi ``logprobs``; ``fields`` replace LossInputs fields."""
        inputs = LossInputs(logprobs, self.old_logprobs, self.advantages, self.loss_mask, self.rollout_logprobs,
                            self.has_rollout_logprobs, self.ref_logprobs)
        return replace(inputs, **fields)


def token_logprobs(
    model: torch.nn.Module, input_ids: Tensor, temperature: float = 0.7, dtype: torch.dtype | None = None
) -> Tensor:
    """(B, SEQ-1) log pi(x_{t+1} | x_<=t) from temperature-scaled logits; ``dtype``: autocast the
    model (mixed precision), the log-softmax stays fp32."""
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        logits = model(input_ids=input_ids).logits
    logits = logits[:, :-1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)


def ragged_batch(model: torch.nn.Module, rows: int = 8, seed: int = 1) -> Batch:
    """Unequal lengths, a prompt span, an observation span, one empty row, one A = 0 row,
    off-policy old/rollout logprobs (so ratios != 1 and TIS weights vary), one row without
    rollout logprobs, reference log-probs away from the current ones (KL > 0)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (rows, SEQ), generator=gen)
    mask = torch.zeros(rows, SEQ - 1, dtype=torch.bool)
    for i in range(rows):
        prompt = 2 + i % 3
        length = 3 + (5 * i) % (SEQ - 1 - prompt - 2)  # generated + observation tokens
        mask[i, prompt : prompt + length] = True
        if length > 5:
            mask[i, prompt + 2 : prompt + 4] = False  # an observation span inside the response
    mask[2] = False  # an empty row (e.g. context overflow before any generated token)
    adv = torch.randn(rows, generator=gen)
    adv[5] = 0.0  # a row with zero advantage (zero-variance group)
    with torch.no_grad():
        current = token_logprobs(model, ids)
    old = current + 0.8 * torch.randn(current.shape, generator=gen)
    rollout = old + 0.8 * torch.randn(current.shape, generator=gen)
    has = torch.ones(rows, dtype=torch.bool)
    has[6] = False
    rollout[6] = float("nan")  # must never leak
    ref = current + 0.5 * torch.randn(current.shape, generator=gen)
    return Batch(ids, mask, adv, old, rollout, has, ref)
