"""From trajectories to padded tensors: the rows the policy update consumes.

Layout ("shifted grid"): a row is ``prompt_ids + response_ids`` right-padded to L tokens;
every per-token tensor has L-1 columns, column j holding the quantity of the token at
position j+1 (the token predicted from the prefix ``[0..j]``). Response token k of row i sits
in column ``P_i - 1 + k``. Prompt, observation and padding columns carry loss mask False.

An episode whose context was summarized has several token sequences (``Trajectory.segments``):
each becomes a row of its own, all with the episode's advantage (SkyRL's step-wise
trajectories: advantages computed once per trajectory, then given to each of its steps).
Rows carry the index of their episode so mini-batches never split one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from swerl.agent.trajectory import Segment, Trajectory
from swerl.rl.config import AgentFailureTokens
from swerl.rl.support import NO_TOKEN, pad_supports


@dataclass(frozen=True)
class Row:
    """One trajectory as the trainer sees it.

    Attributes:
        prompt_ids: (P,) int64.
        response_ids: (T,) int64.
        loss_mask: (T,) bool, True on trainable (model-generated) tokens; all False for
            failed (``mask`` class) and padding rows.
        rollout_logprobs: (T,) float32 sampling log-probs, or None (TIS weight 1).
        advantage: scalar A of the row (broadcast to its tokens).
        old_logprobs: (T,) float32 log pi_old recomputed by the trainer, or None before it is.
        ref_logprobs: (T,) float32 log pi_ref of the reference policy, or None (no KL term, or
            before the trainer computed it).
        episode_index: index of the trajectory the row comes from in the step's batch (rows of
            one episode share it; mini-batches are cut between episodes); None = a row of its own.
        support: (T, K) int64 kept set of each token under top-k / top-p (``rl.support``, padded
            with ``NO_TOKEN``; a row of ``NO_TOKEN`` = the vocabulary), or None (none stored).
        version_lag: (T,) int64 policy versions between the weights that sampled each token and
            those the step trains (0 = on-policy), or None (unknown).
        old_log_mass: (T,) float32 log S_t under pi_old (the kept set's mass), or None.
    """

    prompt_ids: Tensor
    response_ids: Tensor
    loss_mask: Tensor
    rollout_logprobs: Tensor | None
    advantage: float
    old_logprobs: Tensor | None = None
    episode_index: int | None = None
    ref_logprobs: Tensor | None = None
    support: Tensor | None = None
    version_lag: Tensor | None = None
    old_log_mass: Tensor | None = None

    @property
    def num_trainable_tokens(self) -> int:
        """Tokens that may enter the loss numerator."""
        return int(self.loss_mask.sum())


def row_from_trajectory(traj: Trajectory, advantage: float, agent_failure_tokens: AgentFailureTokens = "train") -> Row:
    """Build the :class:`Row` of the trajectory's last token sequence; a ``mask``-class
    trajectory keeps its tokens but no trainable ones, and so does a ``zero``-class one
    (agent failure) when ``agent_failure_tokens="mask"``."""
    return rows_from_trajectory(traj, advantage, agent_failure_tokens)[-1]


def rows_from_trajectory(traj: Trajectory, advantage: float, agent_failure_tokens: AgentFailureTokens = "train",
                         episode_index: int | None = None, *, overlong_filter: bool = False,
                         trained_version: int | None = None) -> list[Row]:
    """One :class:`Row` per token sequence of the episode (one unless it was summarized), in
    sampling order, each with the episode's ``advantage`` and its own loss mask (generated ids
    only); trainable tokens are dropped as in :func:`row_from_trajectory`, and, with
    ``overlong_filter``, for an episode whose turn hit its token budget (``hit_length_limit``).
    ``trained_version`` (the policy version the step trains, step - 1) sets each token's
    ``version_lag``."""
    untrained = traj.failure_class == "mask" or (traj.failure_class == "zero" and agent_failure_tokens == "mask")
    untrained = untrained or (overlong_filter and traj.hit_length_limit)
    sequences = traj.token_sequences()
    rows = []
    for seq in sequences:
        mask = torch.tensor(seq.loss_mask, dtype=torch.bool)
        lp = None if seq.rollout_logprobs is None else torch.tensor(seq.rollout_logprobs, dtype=torch.float32)
        rows.append(Row(
            prompt_ids=torch.tensor(seq.prompt_ids, dtype=torch.int64),
            response_ids=torch.tensor(seq.response_ids, dtype=torch.int64),
            loss_mask=torch.zeros_like(mask) if untrained else mask,
            rollout_logprobs=lp,
            advantage=float(advantage),
            episode_index=episode_index,
            support=None if seq.rollout_support is None else pad_supports(seq.rollout_support),
            version_lag=_version_lag(seq, traj.turn_weight_versions, trained_version, len(sequences) == 1),
        ))
    return rows


def _version_lag(seq: Segment, versions: list[int], trained_version: int | None, single: bool) -> Tensor | None:
    """(T,) int64 lag of each token: ``trained_version`` minus the version of the turn that sampled
    it. A one-sequence episode maps its turns to the runs of generated ids when they match one to
    one; otherwise every token gets the episode's oldest turn's lag (as ``async/staleness_max``)."""
    if trained_version is None or not versions:
        return None
    lag = torch.full((len(seq.response_ids),), trained_version - min(versions), dtype=torch.int64)
    runs = _generated_runs(seq.loss_mask)
    if single and len(runs) == len(versions):
        for (start, stop), version in zip(runs, versions, strict=True):
            lag[start:stop] = trained_version - version
    return lag


def _generated_runs(loss_mask: list[int]) -> list[tuple[int, int]]:
    """[start, stop) of each maximal run of generated ids (loss mask 1)."""
    runs: list[tuple[int, int]] = []
    for t, bit in enumerate(loss_mask):
        if bit and (not runs or runs[-1][1] != t):
            runs.append((t, t + 1))
        elif bit:
            runs[-1] = (runs[-1][0], t + 1)
    return runs


def mini_batches(rows: list[Row], episodes_per_mini_batch: int) -> list[list[Row]]:
    """Cut ``rows`` (episodes contiguous) into mini-batches of ``episodes_per_mini_batch``
    episodes each; with one row per episode, that many rows."""
    minis: list[list[Row]] = []
    episodes: list[int] = []
    for row in rows:
        if not episodes or row.episode_index is None or row.episode_index != episodes[-1]:
            if len(episodes) == episodes_per_mini_batch:
                episodes = []
            if not episodes:
                minis.append([])
            episodes.append(row.episode_index)
        minis[-1].append(row)
    return minis


def padding_row(like: Row) -> Row:
    """A row that only keeps ranks in step: ``like``'s prompt and at most its first response token
    (its first response column stays where ``like``'s is, so a micro-batch's ``logits_to_keep``
    does not grow; no full-length forward for nothing), nothing trainable, A = 0."""
    response = like.response_ids[:1]
    cut = len(response)

    def first(values: Tensor | None, fill: bool) -> Tensor | None:
        return values[:cut] if values is not None else (torch.zeros(cut) if fill else None)

    return replace(like, response_ids=response, loss_mask=torch.zeros(cut, dtype=torch.bool),
                   rollout_logprobs=first(like.rollout_logprobs, False), advantage=0.0,
                   old_logprobs=first(like.old_logprobs, True), ref_logprobs=first(like.ref_logprobs, True),
                   old_log_mass=first(like.old_log_mass, True), support=first(like.support, False),
                   version_lag=first(like.version_lag, False))


@dataclass(frozen=True)
class MicroBatch:
    """Padded tensors of n rows (shapes on the shifted grid, see module docstring).

    Attributes:
        input_ids: (n, L) int64, right-padded with ``pad_id``.
        attention_mask: (n, L) int64.
        loss_mask: (n, L-1) bool.
        advantages: (n, L-1) float32, A of the row on every column (masked by ``loss_mask``).
        rollout_logprobs: (n, L-1) float32, 0 where missing.
        has_rollout_logprobs: (n,) bool, False for rows without sampling log-probs.
        old_logprobs: (n, L-1) float32 or None.
        ref_logprobs: (n, L-1) float32 or None (only when every row has them).
        response_starts: (n,) int64, column of each row's first response token.
        response_lengths: (n,) int64, T of each row.
        support: (n, L-1, K) int64 kept sets (``NO_TOKEN`` rows where none), or None when no row
            has one.
        replay_support: normalise log-probs over ``support`` (``algorithm.sampling_support=replay``)
            in every forward of this micro-batch (pi, pi_old, pi_ref); False = the vocabulary.
        version_lag: (n, L-1) int64 lag of each token (-1 where unknown).
        old_log_mass: (n, L-1) float32 log S_t under pi_old, or None.
    """

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    advantages: Tensor
    rollout_logprobs: Tensor
    has_rollout_logprobs: Tensor
    old_logprobs: Tensor | None
    response_starts: Tensor
    response_lengths: Tensor
    ref_logprobs: Tensor | None = None
    support: Tensor | None = None
    replay_support: bool = False
    version_lag: Tensor | None = None
    old_log_mass: Tensor | None = None

    def to(self, device: torch.device) -> "MicroBatch":
        """Copy every tensor to ``device``."""
        moved = {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in self.__dict__.items()}
        return MicroBatch(**moved)

    def response_values(self, grid: Tensor) -> list[Tensor]:
        """Cut a (n, L-1) grid tensor back into per-row (T_i,) response-aligned tensors."""
        out = []
        for i in range(grid.shape[0]):
            s, t = int(self.response_starts[i]), int(self.response_lengths[i])
            out.append(grid[i, s : s + t].detach().to("cpu", torch.float32))
        return out


def collate(rows: list[Row], pad_id: int = 0, replay_support: bool = False) -> MicroBatch:
    """Pad ``rows`` to the longest sequence among them (not the step's longest: less compute);
    ``replay_support`` as :attr:`MicroBatch.replay_support`."""
    n = len(rows)
    seq_lens = [len(r.prompt_ids) + len(r.response_ids) for r in rows]
    length = max(max(seq_lens), 2)
    input_ids = torch.full((n, length), pad_id, dtype=torch.int64)
    attention_mask = torch.zeros((n, length), dtype=torch.int64)
    loss_mask = torch.zeros((n, length - 1), dtype=torch.bool)
    advantages = torch.zeros((n, length - 1), dtype=torch.float32)
    rollout_lp = torch.zeros((n, length - 1), dtype=torch.float32)
    old_lp = torch.zeros((n, length - 1), dtype=torch.float32)
    ref_lp = torch.zeros((n, length - 1), dtype=torch.float32)
    has_old = all(r.old_logprobs is not None for r in rows)
    has_ref = all(r.ref_logprobs is not None for r in rows)
    starts = torch.zeros(n, dtype=torch.int64)
    lengths = torch.zeros(n, dtype=torch.int64)
    width = max((r.support.shape[1] for r in rows if r.support is not None), default=0)
    support = torch.full((n, length - 1, width), NO_TOKEN, dtype=torch.int64) if width else None
    lag = torch.full((n, length - 1), -1, dtype=torch.int64)
    has_mass = all(r.old_log_mass is not None for r in rows)
    mass = torch.zeros((n, length - 1), dtype=torch.float32)
    for i, r in enumerate(rows):
        p, t = len(r.prompt_ids), len(r.response_ids)
        input_ids[i, :p] = r.prompt_ids
        input_ids[i, p : p + t] = r.response_ids
        attention_mask[i, : p + t] = 1
        s = p - 1
        starts[i], lengths[i] = s, t
        loss_mask[i, s : s + t] = r.loss_mask
        advantages[i, s : s + t] = r.advantage
        if r.rollout_logprobs is not None:
            rollout_lp[i, s : s + t] = r.rollout_logprobs
        if has_old:
            old_lp[i, s : s + t] = r.old_logprobs
        if has_ref:
            ref_lp[i, s : s + t] = r.ref_logprobs
        if support is not None and r.support is not None:
            support[i, s : s + t, : r.support.shape[1]] = r.support
        if r.version_lag is not None:
            lag[i, s : s + t] = r.version_lag
        if has_mass:
            mass[i, s : s + t] = r.old_log_mass
    has_rollout = torch.tensor([r.rollout_logprobs is not None for r in rows], dtype=torch.bool)
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        advantages=advantages,
        rollout_logprobs=rollout_lp,
        has_rollout_logprobs=has_rollout,
        old_logprobs=old_lp if has_old else None,
        response_starts=starts,
        response_lengths=lengths,
        ref_logprobs=ref_lp if has_ref else None,
        support=support,
        replay_support=replay_support,
        version_lag=lag,
        old_log_mass=mass if has_mass and support is not None else None,
    )

