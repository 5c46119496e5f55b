"""Which prompts each training step sees: a seeded, epoch-aware, resumable prompt sampler.

Every epoch is one permutation of the task indices drawn from ``seed + epoch``; a step takes
the next ``batch_size`` indices of it and the incomplete tail of an epoch is dropped (as a
``DataLoader(shuffle=True, drop_last=True)`` with a per-epoch seed does). The position
``(epoch, batch_in_epoch)`` is the whole state, so a checkpoint that stores it resumes on the
exact same order.
"""

from __future__ import annotations

import random

from swerl.errors import ConfigError


class PromptSampler:
    """Yields lists of task indices, one list per training step.

    Args:
        num_tasks: size of the task set (N).
        batch_size: prompts per step (B); must satisfy 1 <= B <= N.
        seed: base seed; epoch e uses the permutation of ``random.Random(seed * 1_000_003 + e)``.
        shuffle: False keeps file order in every epoch.

    A task set smaller than one batch gives ``batches_per_epoch == 0``: the run plan then has
    no steps and :meth:`next_batch` raises.
    """

    def __init__(self, num_tasks: int, batch_size: int, seed: int, shuffle: bool = True) -> None:
        if batch_size < 1:
            raise ConfigError(f"loop.train_batch_size={batch_size} must be >= 1")
        self.num_tasks = num_tasks
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.batch_in_epoch = 0

    @property
    def batches_per_epoch(self) -> int:
        """Full batches in one epoch (N // B)."""
        return self.num_tasks // self.batch_size

    def epoch_order(self, epoch: int) -> list[int]:
        """The permutation of task indices used in ``epoch`` (deterministic in seed and epoch)."""
        order = list(range(self.num_tasks))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next_batch(self) -> tuple[int, list[int]]:
        """Advance one step; returns ``(epoch, task indices)`` of length B.

        Raises:
            ConfigError: the task set holds fewer tasks than one batch.
        """
        if self.batches_per_epoch == 0:
            raise ConfigError(
                f"loop.train_batch_size={self.batch_size} needs at least that many tasks, the task set has "
                f"{self.num_tasks}: lower loop.train_batch_size or add tasks"
            )
        if self.batch_in_epoch >= self.batches_per_epoch:
            self.epoch += 1
            self.batch_in_epoch = 0
        start = self.batch_in_epoch * self.batch_size
        indices = self.epoch_order(self.epoch)[start : start + self.batch_size]
        self.batch_in_epoch += 1
        return self.epoch, indices

    def state_dict(self) -> dict:
        """Position and identity of the sampler (JSON-serialisable)."""
        return {
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "seed": self.seed,
            "num_tasks": self.num_tasks,
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a position saved by :meth:`state_dict`.

        Raises:
            ConfigError: the checkpoint was taken with another task set size, batch size or seed
                (the data order would silently differ).
        """
        for key in ("num_tasks", "batch_size", "seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ConfigError(
                    f"checkpoint sampler has {key}={state[key]!r}, the config gives {getattr(self, key)!r}: "
                    "resume with the same data and loop settings"
                )
        self.epoch = int(state["epoch"])
        self.batch_in_epoch = int(state["batch_in_epoch"])
