"""Rows length-balanced across ranks: every row lands on exactly one rank, each rank's forwarded
rows come longest first, and the lockstep padding (what every micro-batch costs: its longest row
on any rank) drops against the contiguous slices of before. Padding rows are short."""

from __future__ import annotations

import random

import torch

from swerl.rl.config import AlgorithmConfig
from swerl.trainer.distributed import DistInfo, rank_slice
from swerl.trainer.step.batch import Row, padding_row
from swerl.trainer.step.update import UpdateSettings, rank_rows, rows_to_forward

ALGO = AlgorithmConfig()
SETTINGS = UpdateSettings(temperature=1.0, rows_per_mini_batch=64, micro_batch_size=2)


def row(prompt: int, response: int, advantage: float = 1.0) -> Row:
    return Row(prompt_ids=torch.arange(prompt), response_ids=torch.arange(response),
               loss_mask=torch.ones(response, dtype=torch.bool), rollout_logprobs=torch.full((response,), -1.0),
               advantage=advantage)


def seed_like_rows(n: int, seed: int = 0) -> list[Row]:
    """Agent rows of very unequal lengths (1k to 32k tokens, log-uniform), a third without signal."""
    rng = random.Random(seed)
    return [row(512, int(2 ** rng.uniform(9, 15)), 0.0 if i % 3 == 2 else 1.0) for i in range(n)]


def contiguous(rows: list[Row], rank: int, world: int) -> list[Row]:
    """The deal of before: a contiguous slice per rank, padded with full-length copies."""
    indices, per_rank = rank_slice(len(rows), rank, world)
    mine = [rows[i] for i in indices]
    return mine + [rows[-1]] * (per_rank - len(mine))


def lockstep_tokens(per_rank: list[list[Row]], micro: int) -> int:
    """Tokens every rank processes in FSDP's lockstep: the forwarded rows of each rank, padded to
    the ranks' most micro-batches; micro-batch i costs micro x its longest row on any rank."""
    batches = []
    for mine in per_rank:
        fwd = rows_to_forward(mine, ALGO, SETTINGS)
        batches.append([max(len(r.prompt_ids) + len(r.response_ids) for r in fwd[i:i + micro])
                        for i in range(0, len(fwd), micro)])
    slots = max(len(b) for b in batches)
    return sum(micro * max(b[i] if i < len(b) else 2 for b in batches) for i in range(slots)) * len(per_rank)


def test_every_row_lands_on_one_rank_and_forwarded_rows_come_longest_first():
    rows = seed_like_rows(37)
    world = 4
    dealt = [rank_rows(rows, DistInfo(rank=r, world_size=world), ALGO, SETTINGS) for r in range(world)]
    real = [id(r) for mine in dealt for r in mine if any(r is x for x in rows)]
    assert sorted(real) == sorted(id(r) for r in rows)  # a partition: none lost, none twice
    assert {len(mine) for mine in dealt} == {10}  # ceil(37 / 4) slots each
    for mine in dealt:
        lengths = [len(r.response_ids) for r in rows_to_forward(mine, ALGO, SETTINGS)]
        assert lengths == sorted(lengths, reverse=True)


def test_balancing_cuts_the_lockstep_padding():
    """Measured on 256 seed-like rows over 8 ranks, micro-batches of 2."""
    rows = seed_like_rows(256)
    world, micro = 8, SETTINGS.micro_batch_size
    before = lockstep_tokens([contiguous(rows, r, world) for r in range(world)], micro)
    after = lockstep_tokens([rank_rows(rows, DistInfo(rank=r, world_size=world), ALGO, SETTINGS)
                             for r in range(world)], micro)
    useful = sum(len(r.prompt_ids) + len(r.response_ids) for r in rows_to_forward(rows, ALGO, SETTINGS))
    assert after < 0.6 * before, (before, after)
    assert useful <= after < 1.3 * useful, (useful, after)  # the balanced deal wastes under 30 %


def test_a_padding_row_is_short_and_keeps_the_first_response_column():
    like = row(300, 5000)
    pad = padding_row(like)
    assert len(pad.prompt_ids) == 300 and len(pad.response_ids) == 1  # logits_to_keep unchanged
    assert pad.num_trainable_tokens == 0 and pad.advantage == 0.0
    assert pad.old_logprobs.shape == pad.ref_logprobs.shape == pad.rollout_logprobs.shape == (1,)


def test_one_rank_buckets_its_micro_batches_by_length():
    """One rank: every row once, forwarded rows longest first and before the rest, and the padded
    tokens of its micro-batches (each costs micro x its longest row) drop against batch order."""
    rows = seed_like_rows(64, seed=1)
    one = DistInfo(rank=0, world_size=1)
    mine = rank_rows(rows, one, ALGO, SETTINGS)
    assert sorted(id(r) for r in mine) == sorted(id(r) for r in rows)
    fwd = rows_to_forward(mine, ALGO, SETTINGS)
    assert mine[:len(fwd)] == fwd  # the rows without signal come last (never forwarded)
    lengths = [len(r.response_ids) for r in fwd]
    assert lengths == sorted(lengths, reverse=True)
    micro = SETTINGS.micro_batch_size
    assert lockstep_tokens([mine], micro) < 0.8 * lockstep_tokens([rows], micro)
