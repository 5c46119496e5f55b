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

from swerl.agent.trajectory import Trajectory
from swerl.rl.config import AgentFailureTokens


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
    """

    prompt_ids: Tensor
    response_ids: Tensor
    loss_mask: Tensor
    rollout_logprobs: Tensor | None
    advantage: float
    old_logprobs: Tensor | None = None
    episode_index: int | None = None
    ref_logprobs: Tensor | None = None

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
                         episode_index: int | None = None) -> list[Row]:
    """One :class:`Row` per token sequence of the episode (one unless it was summarized), in
    sampling order, each with the episode's ``advantage`` and its own loss mask (generated ids
    only); trainable tokens are dropped as in :func:`row_from_trajectory`."""
    untrained = traj.failure_class == "mask" or (traj.failure_class == "zero" and agent_failure_tokens == "mask")
    rows = []
    for seq in traj.token_sequences():
        mask = torch.tensor(seq.loss_mask, dtype=torch.bool)
        lp = None if seq.rollout_logprobs is None else torch.tensor(seq.rollout_logprobs, dtype=torch.float32)
        rows.append(Row(
            prompt_ids=torch.tensor(seq.prompt_ids, dtype=torch.int64),
            response_ids=torch.tensor(seq.response_ids, dtype=torch.int64),
            loss_mask=torch.zeros_like(mask) if untrained else mask,
            rollout_logprobs=lp,
            advantage=float(advantage),
            episode_index=episode_index,
        ))
    return rows


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
    """A row that only keeps ranks in step: same shape as ``like``, nothing trainable, A = 0."""
    old = like.old_logprobs if like.old_logprobs is not None else torch.zeros(len(like.response_ids))
    ref = like.ref_logprobs if like.ref_logprobs is not None else torch.zeros(len(like.response_ids))
    return replace(like, loss_mask=torch.zeros_like(like.loss_mask), advantage=0.0, old_logprobs=old, ref_logprobs=ref)


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


def collate(rows: list[Row], pad_id: int = 0) -> MicroBatch:
    """Pad ``rows`` to the longest sequence among them (not the step's longest: less compute)."""
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
    )

