"""The algorithm's settings (advantage estimator, policy loss, rollout correction, loss reduction,
KL to a reference), validated once at load time; ``AlgorithmConfig.seed_run()`` is the seed run's
recipe (docs/algorithms.md).

Stage: ``rl/``. The trainer receives a validated ``AlgorithmConfig`` and never re-checks it.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

AdvantageEstimator = Literal["rloo", "rloo_n", "grpo"]
PolicyLossName = Literal["regular", "dual_clip", "gspo", "cispo"]
SamplingSupport = Literal["full", "replay"]
AgentFailureTokens = Literal["train", "mask"]
LossReduction = Literal["token_mean", "sequence_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum_norm_global"]
CorrectionLevel = Literal["token", "sequence", "geometric"]
CorrectionMode = Literal["truncate", "mask"]
KlEstimator = Literal["k1", "k2", "k3"]

TIS_COMPATIBLE_LOSSES: frozenset[str] = frozenset({"regular", "dual_clip", "gspo", "cispo"})
"""Policy losses whose per-token loss a rollout correction may reweight (docs/algorithms.md, Rollout corrections)."""
SEQNORM_REDUCTIONS: frozenset[str] = frozenset({"seq_mean_token_sum_norm", "seq_mean_token_sum_norm_global"})
"""Reductions that divide by ``max_seq_len`` and so require it explicitly."""

SEED_RUN_MAX_SEQ_LEN = 32768
"""The seed run's context length in tokens (prompt budget + generation budget)."""


class DynamicSamplingConfig(BaseModel):
    """``algorithm.dynamic_sampling``: drop groups without signal and refill the step from the
    next prompts of the data order (docs/algorithms.md, Dynamic sampling)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool = False
    """Drop every group without signal and sample more prompts until the step holds
    ``loop.train_batch_size`` groups with signal (off: every group trains, zero-advantage ones
    included, as the seed run did)."""

    max_extra_rounds: int = Field(4, ge=1, le=100)
    """Most extra sampling rounds per step; round r draws as many next prompts as groups are still
    missing. When they run out the step trains on the groups it has (fewer than
    ``train_batch_size``, possibly none) and ``dynamic_sampling/batch_filled`` reads 0."""

    @model_validator(mode="after")
    def _check_read(self) -> "DynamicSamplingConfig":
        default = type(self).model_fields["max_extra_rounds"].default
        if not self.enabled and self.max_extra_rounds != default:
            raise ValueError(f"max_extra_rounds={self.max_extra_rounds} is only read with enabled: true: set "
                             "enabled: true or remove max_extra_rounds")
        return self


class RolloutCorrectionConfig(BaseModel):
    """How the sampler/trainer mismatch pi_old / mu is corrected (docs/algorithms.md, Rollout
    corrections): the ratio is taken per token, per sequence (product over the trainable tokens)
    or as the sequence's geometric mean, then truncated at ``high`` or used to mask what leaves
    [``low``, ``high``].

    | level / mode | weight of the per-token policy loss | known as |
    |---|---|---|
    | token / truncate | min(rho_t, high) | TIS (``use_tis``) |
    | sequence / truncate | min(rho_seq, high) | sequence-level TIS |
    | token / mask | rho_t if low <= rho_t <= high else 0 | IcePop |
    | sequence / mask | rho_seq if low <= rho_seq <= high else 0 | sequence-level MIS |
    | geometric / mask | 1 if low <= rho_geo <= high else 0 | geometric-mean rejection |

    Raises (at validation): ``ValidationError`` naming the field and the fix for geometric /
    truncate, a ``low`` with ``truncate``, and bounds that would reject a perfect match (rho = 1).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    level: CorrectionLevel = "token"
    """``token`` (rho_t = pi_old / mu per token), ``sequence`` (rho_seq = the product over the row's
    trainable tokens) or ``geometric`` (rho_geo = rho_seq ** (1 / n_i), mask mode only)."""

    mode: CorrectionMode = "truncate"
    """``truncate``: weight min(rho, high); ``mask``: tokens (token level) or whole rows (sequence,
    geometric) whose ratio leaves [low, high] get weight 0."""

    high: float = Field(2.0, gt=0.0)
    """``truncate``: the cap C (> 0); ``mask``: the upper bound (>= 1)."""

    low: float | None = Field(None, gt=0.0)
    """``mask`` only: the lower bound (<= 1); None = 1 / high. ``truncate`` has no lower bound."""

    @model_validator(mode="after")
    def _check_bounds(self) -> "RolloutCorrectionConfig":
        if self.level == "geometric" and self.mode == "truncate":
            raise ValueError("rollout_correction.level=geometric is a rejection rule: set mode=mask "
                             "(or level=token/sequence to truncate)")
        if self.mode == "truncate" and self.low is not None:
            raise ValueError("rollout_correction.low applies to mode=mask only (truncation has no lower bound): "
                             "remove low or set mode=mask")
        if self.mode == "mask" and not self.lower_bound <= 1.0 <= self.high:
            raise ValueError(f"rollout_correction bounds [{self.lower_bound}, {self.high}] must contain 1 "
                             "(else the samples whose sampler and trainer agree are rejected): set low <= 1 <= high")
        return self

    @property
    def lower_bound(self) -> float:
        """The mask's lower bound: ``low``, or 1 / ``high`` when unset."""
        return self.low if self.low is not None else 1.0 / self.high

    @property
    def log_bounds(self) -> tuple[float, float]:
        """(log lower bound, log high), for comparisons in log space."""
        return math.log(self.lower_bound), math.log(self.high)


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
    """``regular`` (PPO clip, asymmetric), ``dual_clip`` (adds the lower bound -c*A for A < 0),
    ``gspo`` (sequence-level ratio, the geometric mean over the row's trainable tokens, clipped;
    Zheng et al. 2025) or ``cispo`` (clipped, detached IS weight times log pi; MiniMax-M1 2025).
    All four clip with ``eps_clip_low`` / ``eps_clip_high`` (docs/algorithms.md, Policy loss)."""

    eps_clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    """Lower clip: the ratio (``gspo``: the sequence ratio; ``cispo``: the IS weight) is clipped at
    1 - eps_clip_low."""

    eps_clip_high: float = Field(0.05, ge=0.0)
    """Upper clip: the ratio is clipped at 1 + eps_clip_high (seed run: 0.05, asymmetric; GSPO's
    paper: 4e-4 with eps_clip_low 3e-4)."""

    clip_ratio_c: float = Field(3.0, gt=1.0)
    """``dual_clip``: for A < 0 the per-token loss is capped at -c*A; must be > 1."""

    use_tis: bool = True
    """Token-level truncated importance sampling against the sampler's log-probs; an alias of
    ``rollout_correction: {level: token, mode: truncate, high: tis_imp_ratio_cap}``. Must be false
    when ``rollout_correction`` is set."""

    tis_imp_ratio_cap: float = 2.0
    """TIS cap C: w = min(pi_old / mu, C); must be > 0 when ``use_tis``."""

    rollout_correction: RolloutCorrectionConfig | None = None
    """The sampler/trainer mismatch correction as one block (level, mode, bounds); None = the
    ``use_tis`` alias decides. See :attr:`correction` for the one in force."""

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
    """Add ``kl_loss_coef`` x KL(pi || pi_ref) to the loss, the reference being the initial policy
    (a frozen copy the trainer holds); reduced like the policy loss (``loss_reduction``)."""

    kl_loss_coef: float = Field(0.0, ge=0.0)
    """Weight beta of the KL term; > 0 exactly when ``use_kl_loss`` (peers: 0.001 in verl and
    SkyRL, 0.05 in open-instruct)."""

    kl_estimator: KlEstimator = "k3"
    """Per-token estimator of KL(pi || pi_ref) from the sampled tokens, d = log pi_ref - log pi:
    k1 = -d, k2 = d^2 / 2, k3 = exp(d) - d - 1 (Schulman 2020, "Approximating KL Divergence")."""

    entropy_coef: float = Field(0.0, ge=0.0)
    """Entropy bonus weight (0 = off): the loss gains -entropy_coef * token-mean entropy."""

    dynamic_sampling: DynamicSamplingConfig = DynamicSamplingConfig()
    """DAPO dynamic sampling: groups without signal are dropped and the step is refilled from the
    next prompts, within ``max_extra_rounds`` extra rounds (off in the seed run)."""

    # -- the sampler's support and truncated responses (docs/algorithms.md, Sampling support) --
    sampling_support: SamplingSupport = "full"
    """Over which tokens the trainer normalises log pi_old and log pi: ``full`` = the whole
    vocabulary (log_softmax(z / T)); ``replay`` = the set K_t the sampler drew token t from
    (its top-k / top-p survivors, stored with the episode), so that pi_old / mu compares the same
    distribution. Without top-k / top-p the two are identical bit for bit."""

    overlong_filter: bool = False
    """Mask the loss of episodes whose response was cut by the token limit (a turn ended on its
    ``max_new_tokens`` budget: ``Trajectory.hit_length_limit``); they keep their reward in the group
    baseline (DAPO's overlong filtering; SkyRL ``apply_overlong_filtering``). Counted in
    ``response_length/overlong_filtered_fraction``."""

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
        if self.use_tis and self.rollout_correction is not None:
            raise ValueError("use_tis=true is the token-level truncate correction and rollout_correction is set too: "
                             "set use_tis=false (the rollout_correction block replaces it) or remove the block")
        if self.rollout_correction is not None and self.tis_imp_ratio_cap != _default("tis_imp_ratio_cap"):
            raise ValueError(f"tis_imp_ratio_cap={self.tis_imp_ratio_cap} would be ignored (rollout_correction is set): "
                             "put the bound in rollout_correction.high and remove tis_imp_ratio_cap")
        if self.correction is not None and self.policy_loss not in TIS_COMPATIBLE_LOSSES:
            raise ValueError(
                f"a rollout correction requires policy_loss in {sorted(TIS_COMPATIBLE_LOSSES)}, got {self.policy_loss!r}"
            )
        if self.use_kl_loss and self.kl_loss_coef <= 0:
            raise ValueError("use_kl_loss=true with kl_loss_coef=0 adds nothing: set kl_loss_coef > 0 (e.g. 0.001)")
        if not self.use_kl_loss and self.kl_loss_coef > 0:
            raise ValueError(f"kl_loss_coef={self.kl_loss_coef} would be ignored with use_kl_loss=false: "
                             "set use_kl_loss=true or kl_loss_coef=0")
        if self.loss_reduction in SEQNORM_REDUCTIONS and self.max_seq_len is None:
            raise ValueError(
                f"loss_reduction={self.loss_reduction!r} requires max_seq_len (prompt + generation budget "
                f"in tokens, e.g. {SEED_RUN_MAX_SEQ_LEN}): set max_seq_len"
            )
        return self

    @property
    def correction(self) -> RolloutCorrectionConfig | None:
        """The rollout correction in force: the ``rollout_correction`` block, else token-level
        truncation at ``tis_imp_ratio_cap`` when ``use_tis``, else None (no correction)."""
        if self.rollout_correction is not None:
            return self.rollout_correction
        if self.use_tis:
            return RolloutCorrectionConfig(level="token", mode="truncate", high=self.tis_imp_ratio_cap)
        return None

    @classmethod
    def seed_run(cls) -> "AlgorithmConfig":
        """The seed run's recipe: RLOO-n (n=8, k=4, zero-variance filter), PPO clip 0.2/0.05,
        TIS cap 2.0, ``seq_mean_token_sum_norm_global`` with L_max = 32768, agent-failure rows
        loss-masked, KL and entropy off; log-probs over the whole vocabulary (``sampling_support``
        ``full``, as the seed's SkyRL), no overlong filter."""
        return SEED_RUN


def _default(field: str) -> object:
    """The declared default of an ``AlgorithmConfig`` field."""
    return AlgorithmConfig.model_fields[field].default


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
    dynamic_sampling=DynamicSamplingConfig(enabled=False),  # the seed run trained every group
    sampling_support="full",
    overlong_filter=False,
)
"""The seed run's ``AlgorithmConfig`` (docs/algorithms.md)."""
