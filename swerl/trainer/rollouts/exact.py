"""The exact schedule of the rollout pipeline (``loop.exact_staleness``, on by default with
``loop.max_staleness_steps = k >= 1``): which weights sample which batch is fixed by the step
numbers, never by timing, so a seeded run repeats and a resume continues bit for bit where the
generator allows it (docs/async.md, "Exact schedule").

- Batch s is sampled entirely by weight version ``v(s) = max(s - 1 - k, start)`` (``start``: the
  step the run started or resumed at). Staleness is exactly k for every batch after the first k.
- Weights reach the producer's generator only between two batches: the trainer's ``publish(t)``
  stages version t (``sync.stage``: a snapshot for the HF copy, a folder for vLLM) into one slot,
  and the producer applies it before it starts batch t + k + 1, the first that needs it. No
  generate call or request ever sees a weight change.
- One slot is enough: ``publish(t)`` first waits until batch t + k (which needs version t - 1)
  has started, or there is no such batch, or the producer stopped. No deadlock: the producer
  reaches batch t + k with versions published before t. In steady state nothing is lost: when
  the rollouts are the slower stage the trainer waits here instead of in ``take(t + 1)``.
- Held-out evaluation samples with the trainer's own module (HF generate on the live weights), the
  version just published, since the producer's generator holds an older one by design.
- A checkpoint at step r saves batches r + 1 .. r + k (collected with versions the checkpoint
  does not hold) beside it; a resume puts them back into the ready buffer, and the producer goes
  on at batch r + k + 1 with version r, as the uninterrupted run did.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from swerl import metric_keys
from swerl.inference.backends.hf import HFBackend
from swerl.inference.weight_sync.base import Staged
from swerl.inference.weight_sync.module_share import ModuleShare
from swerl.trainer.rollouts.busy import MeteredBackend, MeteredStream, metered
from swerl.trainer.rollouts.pipeline import Context, PipelinedRollouts, RolloutBatch
from swerl.trainer.rollouts.runner import RolloutRunner

log = logging.getLogger(__name__)


class ExactRollouts(PipelinedRollouts):
    """``k >= 1`` with the exact schedule: batch s on version ``max(s - 1 - k, start)``, weights
    applied by the producer between batches only.

    Args:
        ctx: the loop's setup. start_step: the step the run starts or resumed at. last_step: the
            plan's last step. max_staleness: k >= 1. pending: the batches start_step + 1, ...
            that the resumed checkpoint saved (see :meth:`pending`), or None.
    """

    def __init__(self, ctx: Context, start_step: int, last_step: int, max_staleness: int,
                 pending: list[RolloutBatch] | None = None) -> None:
        self._live: HFBackend | None = None
        super().__init__(ctx, start_step, last_step, max_staleness)
        self.start = start_step
        self._staged: Staged | None = None  # the one slot: the version the next update needs
        self._admitted_through = start_step  # the newest batch started with its version
        if pending:
            self._restore(pending)

    def version_for(self, step: int) -> int:
        """The weight version that samples every turn of batch ``step``."""
        return max(step - 1 - self.k, self.start)

    def _eval_backend(self) -> MeteredBackend | MeteredStream:
        """HF generate on the trainer's live module: the version the trainer just published."""
        ctx = self.ctx
        if isinstance(ctx.generator.sync, ModuleShare):
            self._live = ctx.generator.backend
        else:
            from swerl.trainer.policy.lora import hf_module

            self._live = HFBackend(hf_module(ctx.model), ctx.generator.backend.tokenizer,
                                   seed=ctx.config.generator.seed, weight_version=self.next_step - 1)
        return metered(self._live, ctx.clock)

    def _restore(self, pending: list[RolloutBatch]) -> None:
        """Put the checkpoint's batches back in the ready buffer; the sampler moves past them,
        keeping the quarantine marks the checkpoint's own state holds."""
        sampler = self.ctx.sampler
        marks = dict(sampler.quarantined)
        sampler.load_state_dict(pending[-1].sampler_state)
        sampler.quarantine(marks)
        with self._cond:
            self._ready.update({batch.step: batch for batch in pending})
        self._admitted_through = pending[-1].step
        self.next_step = pending[-1].step + 1
        log.info("resumed with batches %s collected before the checkpoint; the producer goes on at batch %d with "
                 "version %d", [b.step for b in pending], self.next_step, self.version_for(self.next_step))

    # ---- producer thread ------------------------------------------------------------------

    def _produce_batches(self, runner: RolloutRunner) -> None:
        """One batch at a time: weights are applied between two batches, never under one."""
        self._produce_one_at_a_time(runner)

    def _admitted(self, step: int) -> bool:
        """Wait until version ``v(step)`` is published, then make the generator hold it (apply the
        staged slot, no request in flight: between two batches). False when stopping."""
        need = self.version_for(step)
        with self._cond:
            self._cond.wait_for(lambda: self._stop.is_set() or self._published >= need)
            if self._stop.is_set():
                return False
            self._producing.add(step)
            staged = self._staged
        if self.metered.inner.weight_version != need:
            assert staged is not None and staged.version == need, (step, need, staged)
            with self.ctx.clock.busy("update"), self.metered.exclusive():
                self.generator.sync.apply(staged)
            with self._cond:
                self._staged = None
        assert self.metered.inner.weight_version == need, (step, need, self.metered.inner.weight_version)
        with self._cond:
            self._admitted_through = step
            self._cond.notify_all()
        return True

    # ---- trainer thread -------------------------------------------------------------------

    def publish(self, step: int) -> dict[str, float]:
        """Stage the weights after ``step`` steps for batch step + k + 1, once batch step + k has
        started with version step - 1 (the slot is then free); nothing is staged when no batch of
        the plan needs it. ``timing/weight_sync_wait_s``: that wait (seconds)."""
        t0 = time.monotonic()
        with self._cond:
            self._cond.wait_for(lambda: self._stop.is_set() or self._error is not None
                                or self._admitted_through >= step + self.k or step + self.k > self.last_step)
        waited = {metric_keys.TIMING_WEIGHT_SYNC_WAIT_S: time.monotonic() - t0}
        self._live.weight_version = step
        if step + self.k + 1 > self.last_step:
            with self._cond:
                self._published = step
                self._cond.notify_all()
            return waited
        with self.ctx.clock.busy("update"):
            staged = self.generator.sync.stage(self.ctx.model, step)
        with self._cond:
            self._staged, self._published = staged, step
            self._cond.notify_all()
        return {metric_keys.TIMING_WEIGHT_SYNC_S: staged.stage_s,
                metric_keys.INFERENCE_WEIGHT_SYNC_BYTES: float(staged.num_bytes), **waited}

    def pending(self, step: int) -> list[RolloutBatch]:
        """Batches step + 1 .. step + k of the plan, waiting until the producer has finished them
        (the trainer needs step + 1 next anyway): what a checkpoint at ``step`` saves. Their
        trajectories are this rank's share, as the producer left them.

        Raises:
            the error that stopped the producer, as :meth:`take` does.
        """
        wanted = range(step + 1, min(step + self.k, self.last_step) + 1)
        with self._cond:
            self._cond.wait_for(lambda: all(s in self._ready for s in wanted) or self._error is not None)
            if not all(s in self._ready for s in wanted):
                assert self._error is not None
                raise self._error
            return [self._ready[s] for s in wanted]

    def position(self) -> dict[str, Any]:
        """The pipeline's part of a checkpoint's trainer state: ``exact`` True, the batches saved
        beside it are the next k (``buffered_steps``)."""
        return {**super().position(), "exact": True}
