"""The algorithm's settings (advantage estimator, policy loss, TIS, loss reduction), validated
once at load time; ``AlgorithmConfig.seed_run()`` is the seed run's recipe (docs/algorithms.md).

Stage: ``rl/``. The trainer receives a validated ``AlgorithmConfig`` and never re-checks it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

AdvantageEstimator = Literal["rloo", "rloo_n", "grpo"]
PolicyLossName = Literal["regular", "dual_clip"]
AgentFailureTokens = Literal["train", "mask"]
LossReduction = Literal["token_mean", "sequence_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum_norm_global"]

TIS_COMPATIBLE_LOSSES: frozenset[str] = frozenset({"regular", "dual_clip"})
"""Policy losses whose per-token loss TIS may reweight (docs/algorithms.md, Truncated importance sampling)."""
SEQNORM_REDUCTIONS: frozenset[str] = frozenset({"seq_mean_token_sum_norm", "seq_mean_token_sum_norm_global"})
"""Reductions that divide by ``max_seq_len`` and so require it explicitly."""

SEED_RUN_MAX_SEQ_LEN = 32768
"""The seed run's context length in tokens (prompt budget + generation budget)."""


class AlgorithmConfig(BaseModel):
    """RL algorithm settings. Defaults follow the seed run except ``loss_reduction`` /
    ``max_seq_len`` (``token_mean`` / unset), since a seqnorm reduction needs an explicit
    ``max_seq_len``; use :meth:`seed_run` for the full seed recipe.

    Raises (at validation): pydantic ``ValidationError`` whose message names the field and
    the fix, for every illegal combination (see ``_check_combinations``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    advantage_estimator: AdvantageEstimator = "rloo_n"
    """``rloo``, ``rloo_n`` (leave-one-out over non-excluded rows, zero-variance filter, minimum
    group size) or ``grpo`` (std-normalized, comparison runs only)."""

    n_samples_per_prompt: int = Field(8, ge=1)
    """Trajectories sampled per prompt (the group size n)."""

    min_group_size: int = Field(4, ge=1)
    """``rloo_n`` only: a group with fewer non-excluded rows gets A = 0. Must satisfy
    2 <= min_group_size <= n_samples_per_prompt."""

    filter_zero_variance_groups: bool = True
    """``rloo_n``: a group whose non-excluded rewards are all equal gets A = 0 and is counted in
    ``advantage/zero_variance_groups``."""

    grpo_std_eps: float = Field(1e-6, gt=0)
    """``grpo``: added to the group std in the denominator."""

    policy_loss: PolicyLossName = "regular"
    """``regular`` (PPO clip, asymmetric) or ``dual_clip`` (adds the lower bound -c*A for A < 0)."""

    eps_clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    """Lower clip: the ratio is clipped at 1 - eps_clip_low."""

    eps_clip_high: float = Field(0.05, ge=0.0)
    """Upper clip: the ratio is clipped at 1 + eps_clip_high (seed run: 0.05, asymmetric)."""

    clip_ratio_c: float = Field(3.0, gt=1.0)
    """``dual_clip``: for A < 0 the per-token loss is capped at -c*A; must be > 1."""

    use_tis: bool = True
    """Truncated importance sampling against the sampler's log-probs."""

    tis_imp_ratio_cap: float = 2.0
    """TIS cap C: w = min(pi_old / mu, C); must be > 0 when ``use_tis``."""

    loss_reduction: LossReduction = "token_mean"
    """How per-token losses become the step objective (docs/algorithms.md, Loss reductions); the denominators are
    counted over the whole optimizer step (all micro-batches, all ranks)."""

    max_seq_len: int | None = Field(None, ge=1)
    """L_max in tokens (prompt budget + generation budget); required by the two seqnorm
    reductions, never inferred."""

    agent_failure_tokens: AgentFailureTokens = "train"
    """How agent-failure rows (failure class ``zero``: agent timeouts, parse failures, verifier
    timeouts) enter the loss. Both keep reward 0 in the group baseline. ``train``: their generated
    tokens train with their (negative) advantage; ``mask``: their tokens are loss-masked, as the
    seed run's trainer did (they then reach no numerator and no seqnorm denominator)."""

    use_kl_loss: bool = False
    """Add a k3 KL penalty against the reference policy (token mean over the step)."""

    kl_loss_coef: float = Field(0.001, ge=0.0)
    """Weight of the KL term when ``use_kl_loss``."""

    kl_estimator: Literal["k3"] = "k3"
    """KL estimator: k3 = exp(lr - lp) - (lr - lp) - 1 (Schulman 2020)."""

    entropy_coef: float = Field(0.0, ge=0.0)
    """Entropy bonus weight (0 = off): the loss gains -entropy_coef * token-mean entropy."""

    @model_validator(mode="after")
    def _check_combinations(self) -> "AlgorithmConfig":
        n, k = self.n_samples_per_prompt, self.min_group_size
        if self.advantage_estimator == "rloo_n" and n < 2:
            raise ValueError(
                f"n_samples_per_prompt={n}: rloo_n needs at least 2 samples per prompt (each sample's baseline is "
                "the mean of the others): set n_samples_per_prompt >= 2, e.g. 4"
            )
        if self.advantage_estimator == "rloo_n" and not 2 <= k <= n:
            raise ValueError(
                f"min_group_size={k} must satisfy 2 <= min_group_size <= n_samples_per_prompt ({n}): "
                f"set min_group_size in [2, {n}]"
            )
        if self.use_tis and self.tis_imp_ratio_cap <= 0:
            raise ValueError(f"tis_imp_ratio_cap={self.tis_imp_ratio_cap} must be > 0 when use_tis is true")
        if self.use_tis and self.policy_loss not in TIS_COMPATIBLE_LOSSES:
            raise ValueError(
                f"use_tis requires policy_loss in {sorted(TIS_COMPATIBLE_LOSSES)}, got {self.policy_loss!r}"
            )
        if self.loss_reduction in SEQNORM_REDUCTIONS and self.max_seq_len is None:
            raise ValueError(
                f"loss_reduction={self.loss_reduction!r} requires max_seq_len (prompt + generation budget "
                f"in tokens, e.g. {SEED_RUN_MAX_SEQ_LEN}): set max_seq_len"
            )
        return self

    @classmethod
    def seed_run(cls) -> "AlgorithmConfig":
        """The seed run's recipe: RLOO-n (n=8, k=4, zero-variance filter), PPO clip 0.2/0.05,
        TIS cap 2.0, ``seq_mean_token_sum_norm_global`` with L_max = 32768, agent-failure rows
        loss-masked, KL and entropy off."""
        return SEED_RUN


SEED_RUN = AlgorithmConfig(
    advantage_estimator="rloo_n",
    n_samples_per_prompt=8,
    min_group_size=4,
    filter_zero_variance_groups=True,
    policy_loss="regular",
    eps_clip_low=0.2,
    eps_clip_high=0.05,
    clip_ratio_c=3.0,
    use_tis=True,
    tis_imp_ratio_cap=2.0,
    loss_reduction="seq_mean_token_sum_norm_global",
    max_seq_len=SEED_RUN_MAX_SEQ_LEN,
    agent_failure_tokens="mask",
    use_kl_loss=False,
    kl_loss_coef=0.0,
    entropy_coef=0.0,
)
"""The seed run's ``AlgorithmConfig`` (docs/algorithms.md)."""
