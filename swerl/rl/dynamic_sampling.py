"""Dynamic sampling (DAPO): which groups of a step carry a learning signal, and the setting that
makes the trainer drop the others and sample more prompts in their place.

Stage: ``rl/`` (pure: tensors in, tensors out; the setting, ``DynamicSamplingConfig``, is in
``rl/config.py``, which imports no torch). The rollout stage (``trainer/rollouts/dynamic.py``)
draws the extra prompts; this module decides, from the advantages the estimator gave, which groups
count.

A group has signal when the configured advantage estimator gives at least one of its rows a
non-zero advantage. With ``rloo_n`` that is exactly: at least ``min_group_size`` rows not excluded
from the baseline (masked episodes, infrastructure failures) and those rows' rewards not all
equal. Defining it through the estimator keeps one rule for "no signal" in the whole trainer: a
group dropped here is a group the update would have multiplied by zero.

Source: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale"
(arXiv 2503.14476), section 3.2 "Dynamic Sampling"; verl's ``filter_groups`` option.
"""

from __future__ import annotations

import torch
from torch import Tensor


def groups_with_signal(advantages: Tensor, group_ids: Tensor) -> Tensor:
    """Which groups hold a non-zero advantage.

    Args:
        advantages: (N,) float, the estimator's output (excluded rows already 0).
        group_ids: (N,) int64 in [0, G), ``advantages.group_index`` of the rows' group ids.
    Returns: (G,) bool, G = max(group_ids) + 1 (0 when N = 0); True where some row has A != 0.
    Raises: ValueError when the shapes differ.
    """
    if advantages.shape != group_ids.shape or advantages.dim() != 1:
        raise ValueError(f"advantages and group_ids must both be (N,), got {tuple(advantages.shape)} and "
                         f"{tuple(group_ids.shape)}")
    num_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    nonzero = (advantages != 0).to(torch.int64)
    return torch.zeros(num_groups, dtype=torch.int64).index_add_(0, group_ids, nonzero) > 0
