"""Where each training step's batch comes from: the rollout pipeline with bounded staleness
(``loop.max_staleness_steps = k``), see ``docs/async.md``.

Batch s is always the sampler's s-th batch of prompts (the plan's order), every prompt sampled
``n`` times, groups complete (a failed episode is a masked row, never a missing one).

- ``k = 0`` (:class:`InlineRollouts`): the trainer collects batch s itself, with the weights
  after s - 1 steps, then trains on it: the synchronous loop.
- ``k >= 1``, exact schedule (``loop.exact_staleness``, the default; ``exact.py``): batch s is
  sampled by version max(s - 1 - k, start), weights applied between batches only, so a seeded run
  repeats; a checkpoint saves the next k batches.
- ``k >= 1``, timing-driven (:class:`PipelinedRollouts`): a producer thread collects batch s + 1, s + 2, ...
  while the trainer updates on batch s. Admission control: the producer starts batch s only
  once the generator holds weight version >= s - 1 - k, so every turn of batch s is sampled by a
  version the trainer has not moved more than k steps past when it trains on it
  (staleness = (s - 1) - oldest turn's version <= k). Nothing finished is ever discarded.
  Weights reach the producer's generator between requests (``busy.metered``): an HF copy takes
  them at once when idle, else at its next generate call; vLLM engines (each turn one request,
  continuous batching) reload them once the requests in flight have finished, new ones held back
  meanwhile, and are probed. In-flight episodes continue with the new version, recorded per turn.
  Continuous admission (``slots.py``): the producer's episodes share one budget of
  ``concurrency`` slots across batches; once every episode of batch s holds a slot, batch s + 1
  (when admitted) starts its episodes in the slots s's finished ones free, so the slots do not
  idle in s's long tail. Batches are still delivered whole and in order, each one's staleness
  measured on its own turns. With dynamic sampling one batch at a time (s + 1's prompts come
  after s's extra rounds).

Dynamic sampling (``algorithm.dynamic_sampling``, ``dynamic.py``): batch s is then round 0 (the
sampler's s-th batch, or the prompts after the previous step's extra rounds) plus the extra rounds
that refill it, all collected by whoever collects batch s (the trainer, or the producer before it
moves on to s + 1); the admission of batch s is unchanged, and a later round only runs on weights
at least as new, so the staleness bound holds for every round. With k >= 1 it runs on one trainer
rank (the rounds' all-gather would share the trainer's process group from another thread).

A checkpoint stores the sampler position of the last TRAINED batch; on the timing-driven schedule
batches the producer had collected or started beyond it were never trained and are collected again
after a resume (the exact schedule saves them beside the checkpoint instead).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from swerl import metric_keys
from swerl.agent.trajectory import Trajectory
from swerl.inference.config import HFGenerator
from swerl.inference.weight_sync.module_share import ModuleCopy, ModuleShare
from swerl.trainer.rollouts.busy import BusyClock, metered
from swerl.trainer.rollouts.dynamic import fill_batch
from swerl.trainer.config import TrainConfig
from swerl.trainer.distributed import DistInfo
from swerl.trainer.rollouts.concurrency import rank_sandbox, split_count
from swerl.trainer.rollouts.generator import Generator, apply_weights, probe_parity, publish_weights
from swerl.trainer.rollouts.runner import Collector, RolloutRunner, gather_trajectories, rank_share
from swerl.trainer.rollouts.slots import BatchSlots, SlotBudget
from swerl.trainer.rollouts.sampler import PromptSampler

if TYPE_CHECKING:
    from swerl.agent.collect import RolloutEvent
    from swerl.tasks.task_folder import Task
    from swerl.trainer.rollouts.busy import MeteredBackend, MeteredStream

log = logging.getLogger(__name__)

THREADED_AT_ZERO = False  # tests: run k = 0 through the producer thread too (it must change nothing)


@dataclass
class RolloutBatch:
    """One training step's rollouts, as the trainer receives them.

    Attributes:
        step: the global step that trains on it.
        epoch: the sampler's epoch of its prompts.
        trajectories: N = B * n trajectories, all ranks, groups contiguous in prompt order (with
            dynamic sampling: the groups with signal, at most B of them, in the order drawn).
        generated: every trajectory collected for the step, all rounds (= ``trajectories``
            without dynamic sampling); None until gathered.
        sampler_state: the sampler position right after this batch (what a checkpoint stores).
        metrics: ``timing/rollout_s`` (seconds collecting it), ``timing/wait_for_rollouts_s``
            (seconds the trainer waited for it), ``rollout/buffer_depth`` (finished batches
            waiting when the trainer asked), ``async/staleness_mean`` / ``_max`` (steps), and
            ``dynamic_sampling/*`` when it is on.
    """

    step: int
    epoch: int
    trajectories: list[Trajectory]
    sampler_state: dict
    metrics: dict[str, float] = field(default_factory=dict)
    generated: list[Trajectory] | None = None


def staleness(trajs: list[Trajectory], step: int) -> list[int]:
    """Per trajectory with at least one sampled turn: (step - 1) - version of its oldest turn, in steps.

    Step s trains the weights of version s - 1, so 0 means on-policy."""
    out = []
    for traj in trajs:
        versions = traj.turn_weight_versions
        if versions:
            out.append(step - 1 - min(versions))
    return out


def staleness_metrics(trajs: list[Trajectory], step: int) -> dict[str, float]:
    """``async/staleness_mean`` and ``async/staleness_max`` of a batch (steps; 0 when no turn was sampled)."""
    values = staleness(trajs, step)
    return {metric_keys.ASYNC_STALENESS_MEAN: sum(values) / len(values) if values else 0.0,
            metric_keys.ASYNC_STALENESS_MAX: float(max(values, default=0))}


def rollout_seed(cfg: TrainConfig) -> int | None:
    """The base seed of training rollouts when ``agent.seed`` is unset: the run's ``seed`` on the
    HF backend, whose batcher samples every row with its own generator anyway, and on vLLM on CPU,
    where a seeded row costs one more small op per token beside a forward of the whole model (a
    seeded run is then repeatable, measured in docs/inference.md); None (unseeded) on vLLM on GPUs,
    which samples the rows of seeded requests one by one in its sampler (one kernel launch per
    request per decode step), as verl, SkyRL and prime-rl send rollouts. Evaluations and the parity
    probe stay seeded."""
    return cfg.seed if cfg.generator.backend == "hf" or cfg.model.device == "cpu" else None


@dataclass
class Context:
    """What both rollout sources need from the loop's setup."""

    config: TrainConfig
    tasks: list[Task]
    sampler: PromptSampler
    generator: Generator
    model: torch.nn.Module
    run_dir: Path
    info: DistInfo
    clock: BusyClock
    emit_rollout: Callable[[int, Any], None]

    def runner(self, backend: MeteredBackend | MeteredStream) -> RolloutRunner:
        """A rollout runner (own event loop and sandbox manager) on ``backend``, with this rank's
        share of the run's episodes in flight and sandbox slots (``concurrency.rank_sandbox``)."""
        cfg = self.config
        sandbox, episodes = rank_sandbox(cfg.sandbox, cfg.loop.rollout_concurrency or cfg.sandbox.concurrency,
                                         self.info.rank, self.info.world_size)
        gen = cfg.generator  # vLLM batches continuously: the batcher's fields are HF's
        max_batch, wait_s = (gen.max_batch_size, gen.batch_wait_s) if isinstance(gen, HFGenerator) else (1, 0.0)
        return RolloutRunner(backend, backend.tokenizer, sandbox, cfg.agent, episodes, max_batch, wait_s,
                             rollout_seed(cfg))

    def prewarm(self, runner: RolloutRunner) -> None:
        """Start the warm pools of ``runner`` for a step of this rank before the first one: its
        share of ``loop.train_batch_size`` prompts times ``n_samples``, at most its episodes in flight."""
        cfg = self.config
        per_step = split_count(cfg.loop.train_batch_size, self.info.rank, self.info.world_size) * cfg.n_samples
        runner.prewarm(self.tasks, min(runner.concurrency, per_step))

    def prewarm_next(self, runner: RolloutRunner, step: int) -> None:
        """Plan the warm pools for batch ``step`` (its first round: the prompts the sampler draws
        next) once the batch before it is collected, so the containers of tasks with images of
        their own start while the trainer updates rather than when the episodes ask; the plan
        names the batch's trials, so no pool starts more containers than they take."""
        tasks, _, _ = self.share(step, self.sampler.peek_batch())
        trials = len(tasks) * self.config.n_samples
        if trials:
            runner.prewarm(tasks, min(runner.concurrency, trials), trials)

    def share(self, step: int, indices: list[int], round_index: int = 0) -> tuple[list[Task], str, int]:
        """This rank's share of batch ``step`` (prompts ``indices``; round ``round_index`` of dynamic
        sampling): its tasks, their group-id prefix (``step{N}/``, ``step{N}/r{round}/`` after
        round 0) and the batch index of its first task."""
        batch_tasks = [self.tasks[i] for i in indices]
        share, prefix = rank_share(len(batch_tasks), step, self.info.rank, self.info.world_size)
        prefix = f"{prefix}r{round_index}/" if round_index else prefix
        return [batch_tasks[i] for i in share], prefix, share.start

    def collect_local(self, runner: RolloutRunner, step: int, indices: list[int],
                      on_event: Callable[[RolloutEvent], None] | None, round_index: int = 0) -> list[Trajectory]:
        """This rank's share of batch ``step`` (:meth:`share`), timed as ``rollout``."""
        tasks, prefix, first = self.share(step, indices, round_index)
        with self.clock.busy("rollout"):
            return runner.collect(tasks, self.config.n_samples, step, on_event=on_event, group_prefix=prefix,
                                  first_index=first)


def collect_batch(ctx: Context, runner: RolloutRunner, step: int,
                  on_event: Callable[[RolloutEvent], None] | None) -> RolloutBatch:
    """Batch ``step`` with every round dynamic sampling adds (every rank its share of each round,
    gathered after each), groups contiguous; ``metrics`` holds ``timing/rollout_s`` and
    ``dynamic_sampling/*``."""
    epoch, indices = ctx.sampler.next_batch()
    t0 = time.monotonic()
    local = ctx.collect_local(runner, step, indices, on_event)
    trajs = group_batch(gather_trajectories(local))
    if not ctx.config.algorithm.dynamic_sampling.enabled:
        return RolloutBatch(step, epoch, trajs, ctx.sampler.state_dict(),
                            {metric_keys.TIMING_ROLLOUT_S: time.monotonic() - t0}, generated=trajs)
    finished = [len(local)]  # this rank's episodes of the earlier rounds: a round's events count on from them

    def draw(round_index: int, count: int) -> list[Trajectory]:
        more = ctx.collect_local(runner, step, ctx.sampler.next_prompts(count), step_counts(on_event, finished[0]),
                                 round_index)
        finished[0] += len(more)
        return group_batch(gather_trajectories(more))

    filled = fill_batch(ctx.config.algorithm, ctx.config.loop.train_batch_size, trajs, draw)
    return RolloutBatch(step, epoch, filled.trajectories, ctx.sampler.state_dict(),
                        {metric_keys.TIMING_ROLLOUT_S: time.monotonic() - t0, **filled.metrics},
                        generated=filled.generated)


def step_counts(on_event: Callable[[RolloutEvent], None] | None, earlier: int
                ) -> Callable[[RolloutEvent], None] | None:
    """``on_event`` with each event's ``done``/``total`` counted over the step: ``earlier`` episodes
    of the step's earlier rounds added, so a display's count goes on across dynamic sampling's
    extra rounds (``9/16`` then ``17/24``) instead of starting again at ``0/8``."""
    if on_event is None:
        return None
    return lambda ev: on_event(replace(ev, done=earlier + ev.done, total=earlier + ev.total))


def group_batch(trajs: list[Trajectory]) -> list[Trajectory]:
    """Groups contiguous, in first-appearance order, samples by ``sample_index`` (mini-batches cut
    along groups)."""
    order = {g: i for i, g in enumerate(dict.fromkeys(t.group_id for t in trajs))}
    return sorted(trajs, key=lambda t: (order[t.group_id], t.sample_index))


class InlineRollouts:
    """``k = 0``: batch s is collected when the trainer asks for it, with the current weights.

    ``runner`` is also the runner of held-out evaluation.
    """

    def __init__(self, ctx: Context, start_step: int, last_step: int | None = None) -> None:
        self.ctx = ctx
        self.last_step = last_step  # None: no plan ahead (the warm pools of the batch after the last)
        self.metered = metered(ctx.generator.backend, ctx.clock)
        self.runner = ctx.runner(self.metered)

    def __enter__(self) -> "InlineRollouts":
        self.runner.__enter__()
        self.ctx.prewarm(self.runner)
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.__exit__(*exc)

    def take(self, step: int) -> RolloutBatch:
        """Collect batch ``step`` now (every rank its share, then gathered)."""
        ctx = self.ctx
        t0 = time.monotonic()
        ctx.model.eval()
        batch = collect_batch(ctx, self.runner, step, lambda ev: ctx.emit_rollout(step, ev))
        if self.last_step is not None and step < self.last_step:
            ctx.prewarm_next(self.runner, step + 1)
        ctx.generator.sleep_for_update()  # a colocated engine frees the GPU for the update; the sync wakes it
        waited = time.monotonic() - t0
        batch.metrics.update({metric_keys.TIMING_ROLLOUT_S: waited, metric_keys.TIMING_WAIT_FOR_ROLLOUTS_S: waited,
                              "rollout/buffer_depth": 0.0, **staleness_metrics(batch.trajectories, step)})
        return batch

    def publish(self, step: int) -> dict[str, float]:
        """Give the generator the weights after ``step`` steps (then the parity probe)."""
        ctx = self.ctx
        with ctx.clock.busy("update"):
            return publish_weights(ctx.generator, ctx.model, ctx.config, ctx.info, version=step)

    def pending(self, step: int) -> list[RolloutBatch]:
        """Batches past ``step`` a checkpoint must save: none (nothing runs ahead)."""
        return []

    def position(self) -> dict[str, Any]:
        """The pipeline's part of a checkpoint's trainer state."""
        return {"max_staleness_steps": 0, "buffered_steps": [], "producing_step": None}


class PipelinedRollouts:
    """``k >= 1``: a producer thread collects batches ahead of the trainer within the staleness
    bound, several at once (continuous admission, :meth:`_produce_continuously`).

    The producer generates with its own weights: an HF copy of the policy (the trainer's module
    changes under it), or the run's vLLM engines; both behind a metered, gated front (``busy.py``).
    """

    def __init__(self, ctx: Context, start_step: int, last_step: int, max_staleness: int) -> None:
        self.ctx = ctx
        self.k = max_staleness
        self.next_step, self.last_step = start_step + 1, last_step
        self.generator = ctx.generator
        if isinstance(ctx.generator.sync, ModuleShare):  # HF on the live module: generate on a copy
            from swerl.inference.backends.hf import HFBackend
            from swerl.trainer.policy.lora import hf_module

            policy_copy = copy.deepcopy(ctx.model).eval()
            copy_backend = HFBackend(hf_module(policy_copy), ctx.generator.backend.tokenizer,
                                     seed=ctx.config.generator.seed, weight_version=start_step)
            self.generator = Generator(copy_backend, ModuleCopy(copy_backend, policy_copy), owns_backend=False)
        self.metered = metered(self.generator.backend, ctx.clock)
        self.runner = ctx.runner(self._eval_backend())  # held-out eval, in the trainer's thread
        self._published = start_step  # the newest version handed to the generator
        self._ready: dict[int, RolloutBatch] = {}
        self._producing: set[int] = set()  # batches started, not finished
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._producer_runner: RolloutRunner | None = None
        self._thread = threading.Thread(target=self._produce, name="swerl-rollout-producer", daemon=True)

    def __enter__(self) -> "PipelinedRollouts":
        self.runner.__enter__()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        runner = self._producer_runner
        if runner is not None:
            runner.cancel_threadsafe()  # in-flight episodes close their sandboxes
        self._thread.join()
        self.runner.__exit__(*exc)

    def _eval_backend(self) -> MeteredBackend | MeteredStream:
        """What held-out evaluation samples with: the producer's generator, which holds the newest
        published version once the eval's first request has applied it."""
        return self.metered

    # ---- producer thread ------------------------------------------------------------------

    def _admitted(self, step: int) -> bool:
        """Wait until batch ``step`` may start: the generator holds version >= step - 1 - k.
        False when stopping or when a batch in flight failed."""
        with self._cond:
            self._cond.wait_for(lambda: self._stop.is_set() or self._error is not None
                                or self._published >= step - 1 - self.k)
            if self._stop.is_set() or self._error is not None:
                return False
            self._producing.add(step)
        self.metered.apply_staged()  # a version staged while a generate call ran
        assert self.metered.inner.weight_version >= step - 1 - self.k
        return True

    def _produce(self) -> None:
        ctx = self.ctx
        try:
            with ctx.runner(self.metered) as runner:
                self._producer_runner = runner
                ctx.prewarm(runner)
                self._produce_batches(runner)
        except BaseException as err:  # handed to the trainer, which raises it in its own thread
            if not self._stop.is_set():
                log.exception("rollout producer failed")
                self._fail(err)
        finally:
            self._producer_runner = None

    def _fail(self, err: BaseException) -> None:
        """Hand ``err`` to the trainer (its next :meth:`take` raises it) and stop admitting."""
        with self._cond:
            if self._error is None:
                self._error = err
            self._cond.notify_all()

    def _deliver(self, batch: RolloutBatch) -> None:
        with self._cond:
            self._ready[batch.step] = batch
            self._producing.discard(batch.step)
            self._cond.notify_all()

    def _produce_batches(self, runner: RolloutRunner) -> None:
        """Collect batch after batch until the plan ends or the run stops: with continuous
        admission; with dynamic sampling one at a time (batch s + 1's prompts come after every
        extra round of batch s)."""
        if self.ctx.config.algorithm.dynamic_sampling.enabled:
            self._produce_one_at_a_time(runner)
        else:
            runner.run(self._produce_continuously)

    def _produce_one_at_a_time(self, runner: RolloutRunner) -> None:
        """Each batch, all its rounds, finished before the next starts."""
        for step in range(self.next_step, self.last_step + 1):
            if not self._admitted(step):
                return
            batch = self._collect(runner, step)
            if step < self.last_step:
                self.ctx.prewarm_next(runner, step + 1)  # filled while this producer waits for admission
            self._deliver(batch)

    def _collect(self, runner: RolloutRunner, step: int) -> RolloutBatch:
        """Batch ``step``: this rank's share, gathered by the trainer's :meth:`take`; with dynamic
        sampling (one rank: nothing to gather) every round of it, filtered here."""
        ctx = self.ctx
        if ctx.config.algorithm.dynamic_sampling.enabled:
            return collect_batch(ctx, runner, step, None)
        epoch, indices = ctx.sampler.next_batch()
        t0 = time.monotonic()
        local = ctx.collect_local(runner, step, indices, None)
        return RolloutBatch(step, epoch, local, ctx.sampler.state_dict(),
                            {metric_keys.TIMING_ROLLOUT_S: time.monotonic() - t0})

    async def _produce_continuously(self, collector: Collector) -> None:
        """Continuous admission: batch after batch, each started as soon as every episode of the
        one before holds a slot and admission control allows it; all batches share one budget of
        ``concurrency`` slots (``slots.py``), so batch s + 1's episodes take the slots batch s's
        finished ones free while its slowest still run. Each batch is delivered when it is whole.

        Raises: the first error of a batch (after cancelling the others)."""
        budget = SlotBudget(collector.concurrency)
        running: list[asyncio.Task[None]] = []
        # Its own thread for the admission wait (until the trainer publishes): the loop's default
        # executor runs the sandboxes' Docker calls.
        admission = ThreadPoolExecutor(1, thread_name_prefix="swerl-admission")
        loop = asyncio.get_running_loop()
        try:
            for step in range(self.next_step, self.last_step + 1):
                if not await loop.run_in_executor(admission, self._admitted, step):
                    break
                slots, batch = self._start_batch(collector, budget, step)
                running.append(batch)
                started = asyncio.ensure_future(slots.all_started.wait())
                await asyncio.wait([started, batch], return_when=asyncio.FIRST_COMPLETED)
                started.cancel()
                if self._error is not None:  # a batch failed: gather raises its error
                    break
            await asyncio.gather(*running)
        finally:
            for batch in running:
                batch.cancel()
            admission.shutdown(wait=False, cancel_futures=True)

    def _start_batch(self, collector: Collector, budget: SlotBudget, step: int
                     ) -> tuple[BatchSlots, asyncio.Task[None]]:
        """Draw batch ``step``'s prompts (the sampler's next batch) and start its episodes on
        ``budget``: this rank's share, delivered with ``timing/rollout_s`` and
        ``rollout/slot_idle_share`` when its last episode ends (gathered by :meth:`take`)."""
        ctx = self.ctx
        epoch, indices = ctx.sampler.next_batch()
        sampler_state = ctx.sampler.state_dict()  # taken now: the next batch draws before this one ends
        tasks, prefix, first = ctx.share(step, indices)
        slots = budget.batch(len(tasks) * ctx.config.n_samples)

        async def collect() -> None:
            t0 = time.monotonic()
            try:
                with ctx.clock.busy("rollout"):
                    local = await collector.collect(tasks, ctx.config.n_samples, prefix, first, slots=slots)
            except Exception as err:
                self._fail(err)
                raise
            self._deliver(RolloutBatch(step, epoch, local, sampler_state,
                                       {metric_keys.TIMING_ROLLOUT_S: time.monotonic() - t0,
                                        metric_keys.ROLLOUT_SLOT_IDLE_SHARE: slots.idle_share()}))

        return slots, asyncio.create_task(collect(), name=f"swerl-batch-{step}")

    # ---- trainer thread -------------------------------------------------------------------

    def take(self, step: int) -> RolloutBatch:
        """Batch ``step``, waiting for the producer if it is not finished yet.

        Raises:
            the error that stopped the producer (a Docker outage, an inference error), as it was.
        """
        t0 = time.monotonic()
        with self._cond:
            depth = len(self._ready)
            self._cond.wait_for(lambda: step in self._ready or self._error is not None)
            if step not in self._ready:
                log.error("the rollout producer stopped before batch %d", step)
                assert self._error is not None
                raise self._error
            batch = self._ready.pop(step)
        waited = time.monotonic() - t0
        if batch.generated is None:  # this rank's share: every rank's, in prompt order
            batch.trajectories = batch.generated = group_batch(gather_trajectories(batch.trajectories))
        batch.metrics.update({metric_keys.TIMING_WAIT_FOR_ROLLOUTS_S: waited, "rollout/buffer_depth": float(depth),
                              **staleness_metrics(batch.trajectories, step)})
        return batch

    def publish(self, step: int) -> dict[str, float]:
        """Push the weights after ``step`` steps to the producer's generator between two requests,
        then admit the batches this version allows."""
        if isinstance(self.generator.sync, ModuleCopy):
            with self.ctx.clock.busy("update"):
                metrics = self._publish_to_copy(step)
        else:
            metrics = self._publish_to_engines(step)
        with self._cond:
            self._published = step
            self._cond.notify_all()
        return metrics

    def _publish_to_engines(self, step: int) -> dict[str, float]:
        """vLLM: stage the new weights while the engines keep generating (a ``disk`` write), then
        hold new requests and freeze those in flight (``pause``: vLLM's ``/pause?mode=keep``, or the
        in-process engine not stepped), apply, resume them, and probe while they run: a turn that
        spans the update keeps its tokens, carries the version it started under (its oldest, which
        staleness counts) and each token's own sampling log-prob (TIS corrects it). Servers shared
        by every rank (``drain_all_ranks``) still drain: no request of any rank may straddle their
        reload; so do adapter syncs (``keeps_requests`` False: a request names its adapter). The wait is ``timing/weight_sync_wait_s``; staging, applying and probing are busy as
        ``update``."""
        ctx = self.ctx
        with ctx.clock.busy("update"):
            staged = self.generator.sync.stage(ctx.model, step)
        t0 = time.monotonic()
        pause = not self.generator.sync.drain_all_ranks and self.generator.sync.keeps_requests
        with self.metered.exclusive(pause=pause):
            waited = time.monotonic() - t0
            with ctx.clock.busy("update"):
                metrics = apply_weights(self.generator, staged, ctx.model, ctx.config, ctx.info, probe=not pause)
        if pause:  # the probe's requests must not wait behind frozen ones
            with ctx.clock.busy("update"):
                metrics.update(probe_parity(self.generator, ctx.model, ctx.config, ctx.info))
        earlier = metrics.get(metric_keys.TIMING_WEIGHT_SYNC_WAIT_S, 0.0)
        return {**metrics, metric_keys.TIMING_WEIGHT_SYNC_WAIT_S: waited + earlier}

    def _publish_to_copy(self, step: int) -> dict[str, float]:
        """The HF copy: copy the weights in now and probe parity when no generate call runs; else
        have the next generate call apply the snapshot first (the trainer does not wait)."""
        ctx, sync = self.ctx, self.generator.sync
        t0 = time.monotonic()
        staged = sync.stage(ctx.model, step)
        with self.metered.exclusive(blocking=False) as backend:
            if backend is not None:
                sync.apply(staged)
                return {**probe_parity(self.generator, ctx.model, ctx.config, ctx.info),
                        metric_keys.TIMING_WEIGHT_SYNC_S: time.monotonic() - t0,
                        metric_keys.INFERENCE_WEIGHT_SYNC_BYTES: float(staged.num_bytes)}
        self.metered.stage(lambda backend: sync.apply(staged))
        return {metric_keys.TIMING_WEIGHT_SYNC_S: time.monotonic() - t0,
                metric_keys.INFERENCE_WEIGHT_SYNC_BYTES: float(staged.num_bytes)}

    def pending(self, step: int) -> list[RolloutBatch]:
        """Batches past ``step`` a checkpoint saves: none (a resume re-collects them)."""
        return []

    def position(self) -> dict[str, Any]:
        """The pipeline's part of a checkpoint's trainer state (informative: a resume re-collects
        every batch after the checkpoint's step)."""
        with self._cond:
            return {"max_staleness_steps": self.k, "buffered_steps": sorted(self._ready),
                    "producing_step": min(self._producing, default=None),
                    "producing_steps": sorted(self._producing)}
