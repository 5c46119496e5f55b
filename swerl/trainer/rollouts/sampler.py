"""Which prompts each training step sees: a seeded, epoch-aware, resumable prompt sampler.

Every epoch is one permutation of the task indices drawn from ``seed + epoch``; a step takes
the next ``batch_size`` indices of it and the incomplete tail of an epoch is dropped (as a
``DataLoader(shuffle=True, drop_last=True)`` with a per-epoch seed does). The position
``(epoch, batch_in_epoch)`` is the whole state, so a checkpoint that stores it resumes on the
exact same order.

Quarantine (``data.quarantine``): :meth:`PromptSampler.quarantine` marks tasks to leave out from
the first epoch that starts at or after a given step; that epoch's order is the same permutation
without them (so it has fewer batches), and the state holds both the marks and the tasks the
current epoch leaves out.

Dynamic sampling (``algorithm.dynamic_sampling``): :meth:`PromptSampler.next_prompts` draws a
step's extra prompts, the next ones of the same order, crossing into the next epoch where this
one's usable prompts run out. The position is then kept in prompts (``drawn_in_epoch``), so a
step that drew 2B + 3 prompts leaves the next step to start at prompt 2B + 3 of the order; without
extra draws it is always a multiple of B and every batch is the one above.
"""

from __future__ import annotations

import random
import threading

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
        self.drawn_in_epoch = 0
        self.steps_drawn = 0
        self.left_out: list[int] = []
        self.quarantined: dict[int, int] = {}
        self._lock = threading.Lock()

    @property
    def batches_per_epoch(self) -> int:
        """Full batches in the current epoch ((N - tasks it leaves out) // B)."""
        return (self.num_tasks - len(self.left_out)) // self.batch_size

    @property
    def batch_in_epoch(self) -> int:
        """Whole batches of the current epoch drawn so far (``drawn_in_epoch // B``)."""
        return self.drawn_in_epoch // self.batch_size

    @property
    def epoch_done(self) -> bool:
        """Every usable prompt of the current epoch is drawn (its incomplete tail is never drawn)."""
        return self.drawn_in_epoch >= self.batches_per_epoch * self.batch_size

    def epoch_order(self, epoch: int) -> list[int]:
        """The permutation of task indices used in ``epoch`` (deterministic in seed and epoch),
        without the tasks the current epoch leaves out."""
        order = list(range(self.num_tasks))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        left_out = set(self.left_out)
        return [i for i in order if i not in left_out]

    def quarantine(self, marks: dict[int, int]) -> None:
        """Leave task ``i`` out of every epoch that starts at step ``marks[i]`` or later (thread
        safe: the trainer marks while a producer thread draws)."""
        with self._lock:
            for index, step in marks.items():
                self.quarantined.setdefault(index, step)

    def _start_epoch(self, first_step: int) -> None:
        """Move to the next epoch, leaving out the tasks quarantined by ``first_step``, the step
        that draws its first prompt."""
        self.epoch += 1
        self.drawn_in_epoch = 0
        self.left_out = sorted(i for i, step in self.quarantined.items() if step <= first_step)

    def next_batch(self) -> tuple[int, list[int]]:
        """Advance one step; returns ``(epoch, task indices)`` of length B (the epoch of its first prompt).

        Raises:
            ConfigError: the task set holds fewer tasks than one batch.
        """
        with self._lock:
            self._check_nonempty()
            epoch, indices = self._draw(self.batch_size, first_step=self.steps_drawn + 1)
            self.steps_drawn += 1
            return epoch, indices

    def peek_batch(self) -> list[int]:
        """The task indices :meth:`next_batch` would return now, without advancing (a quarantine
        marked in between may still change them: a plan for warm pools, never a draw).

        Raises:
            ConfigError: the task set holds fewer tasks than one batch.
        """
        with self._lock:
            state = self.state_dict()
        twin = PromptSampler(self.num_tasks, self.batch_size, self.seed, self.shuffle)
        twin.load_state_dict(state)
        return twin.next_batch()[1]

    def next_prompts(self, count: int) -> list[int]:
        """The next ``count`` task indices of the order for the step drawn last (dynamic
        sampling's extra prompts; no new step). An epoch that starts here is the current step's.

        Raises:
            ConfigError: the task set holds fewer tasks than one batch.
        """
        with self._lock:
            self._check_nonempty()
            return self._draw(count, first_step=self.steps_drawn)[1]

    def _check_nonempty(self) -> None:
        if self.batches_per_epoch == 0:
            raise ConfigError(
                f"loop.train_batch_size={self.batch_size} needs at least that many tasks, the task set has "
                f"{self.num_tasks}: lower loop.train_batch_size or add tasks"
            )

    def _draw(self, count: int, first_step: int) -> tuple[int, list[int]]:
        """``count`` next indices, starting new epochs as needed; returns (epoch of the first, indices)."""
        indices: list[int] = []
        first_epoch = None
        while len(indices) < count:
            if self.epoch_done:
                self._start_epoch(first_step)
                continue
            take = min(count - len(indices), self.batches_per_epoch * self.batch_size - self.drawn_in_epoch)
            first_epoch = self.epoch if first_epoch is None else first_epoch
            indices += self.epoch_order(self.epoch)[self.drawn_in_epoch : self.drawn_in_epoch + take]
            self.drawn_in_epoch += take
        return (self.epoch if first_epoch is None else first_epoch), indices

    def state_dict(self) -> dict:
        """Position and identity of the sampler (JSON-serialisable)."""
        return {
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "drawn_in_epoch": self.drawn_in_epoch,
            "epoch_done": self.epoch_done,
            "batches_in_epoch": self.batches_per_epoch,
            "steps_drawn": self.steps_drawn,
            "left_out": list(self.left_out),
            "quarantined": {str(i): step for i, step in sorted(self.quarantined.items())},
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
        # Checkpoints before dynamic sampling held whole batches only.
        self.drawn_in_epoch = int(state.get("drawn_in_epoch", int(state["batch_in_epoch"]) * self.batch_size))
        self.left_out = [int(i) for i in state.get("left_out", [])]
        # Checkpoints before quarantine existed: no marks, and the steps drawn follow from the position.
        self.steps_drawn = int(state.get("steps_drawn", self.epoch * self.batches_per_epoch + self.batch_in_epoch))
        self.quarantined = {int(i): int(step) for i, step in state.get("quarantined", {}).items()}
