"""swerl.rl stage: the RL math as pure torch functions (docs/algorithms.md).

- ``config.py``: ``AlgorithmConfig`` (validated once) and the ``SEED_RUN`` preset.
- ``advantages.py``: ``rloo``, ``rloo_n``, ``grpo`` from rewards, group ids and exclusion flags.
- ``policy_loss.py``: per-token ``regular`` / ``dual_clip`` PPO losses, entropy.
- ``kl.py``: the k1 / k2 / k3 estimators of KL(pi || pi_ref).
- ``rollout_correction.py``: token / sequence / geometric corrections, truncated (TIS) or masked.
- ``reductions.py``: the four loss reductions with optimizer-step-level denominators.
- ``logprobs.py``: next-token log-probs and entropies from logits, float32, a chunk of positions at a time.
- ``lm_head.py``: the same from the final hidden states, the LM head's matmul chunked too (no (L, V) logits).
- ``loss.py``: ``compute_advantages`` and ``compute_policy_loss`` (``LossInputs`` in, ``LossOutputs`` out), the
  trainer's two calls.

Nothing here does I/O, holds state or calls torch.distributed; the trainer all-reduces.
"""
