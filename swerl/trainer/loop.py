"""The training loop of ``swerl train``: RLOO-n with PPO-clip, TIS and step-level loss reductions,
rewards from real verifiers in Docker sandboxes.

Reads top to bottom like nanoGPT ``train.py``: setup (from the preflight's tasks and plan: ranks,
seeds, policy, optimizer, resume), then one loop whose blocks each call a named step of a lower stage:

    take the step's batch from the rollout pipeline (prompts -> agent + sandboxes + verifier) ->
    failure classes ->
    advantages -> pi_old (and pi_ref with a KL term) at the sampling temperature -> micro-batched
    policy update (clip, AdamW, LR schedule) -> publish weights to the generator -> commit (HF export, checkpoint, metrics
    record as one unit: ``persistence/commit.py``) -> log.

How it departs from a textbook PPO/GRPO trainer (see ``docs/algorithms.md``):
- No critic, no std normalization: RLOO-n advantages with infrastructure failures left out of
  the baseline; zero-variance and too-small groups get A = 0.
- Loss denominators are counted over the whole optimizer step (all micro-batches, all ranks),
  never a mean of per-micro-batch means; gradients are SUMMED over ranks.
- Rollout corrections (TIS by default) against the sampler's own per-token log-probs; pi_old is
  recomputed by the trainer with logits divided by the sampling temperature.
- An optional KL term to the initial policy, a frozen copy held by the trainer (``step/reference.py``).
- One optimizer step per training batch by default (the ratio is ~1: REINFORCE with a
  leave-one-out baseline); mini-batches and update epochs are options.
- Optional DAPO dynamic sampling (``algorithm.dynamic_sampling``, ``rollouts/dynamic.py``): groups
  without signal are dropped and the step is refilled from the next prompts, within a bound.
- Rollouts with bounded staleness (``rollouts/pipeline.py``, ``docs/async.md``): with
  ``loop.max_staleness_steps = 0`` each batch is sampled with the current weights (synchronous);
  with k >= 1 a producer thread collects later batches while the trainer updates, and no turn
  of a batch is sampled by weights more than k steps older than those it is trained from.

Rank 0 drives the rollouts and writes files; every rank trains on its slice of each batch.
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from swerl import metric_keys
from swerl.agent.records import write_sample_records
from swerl.errors import Interrupted, RunFailed
from swerl.logs import phase
from swerl.rl.advantages import group_index
from swerl.rl.loss import compute_advantages
from swerl.run_layout import CKPT_DIR, CONFIG_FILE, ROLLOUTS_DIR, STEP_DIR_RE, step_file_name
from swerl.text import counted
from swerl.trainer.persistence import checkpoint as ckpt
from swerl.trainer.persistence import commit, hf_export
from swerl.trainer.persistence.background import BackgroundWrites, resolve_async_save
from swerl.trainer import distributed as dist
from swerl.trainer.step.batch import rows_from_trajectory
from swerl.trainer.step.lm_head import configured_chunk_tokens, require_chunkable_head
from swerl.trainer.step.packing import pack_choice
from swerl.trainer.config import TrainConfig
from swerl.trainer.rollouts.evaluation import is_due, run_eval
from swerl.trainer.rollouts import pipeline
from swerl.trainer.setup.auto import changes_since, check_ranks_agree
from swerl.trainer.rollouts.busy import BusyClock
from swerl.trainer.rollouts.generator import close_generator, make_generator, probe_parity, publish_weights
from swerl.trainer.step.masked_guard import MaskedGuard
from swerl.trainer.tracking.metrics import (MetricsSink, dump_trajectories, effective_reward, excluded_from_baseline,
                                            record_flagged, rollout_metrics)
from swerl.trainer.policy.model import compute_dtype, load_policy
from swerl.trainer.step.nonfinite import NonFiniteStreak
from swerl.trainer.step.optim import build_optimizer
from swerl.trainer.setup.plan import RunPlan, reproducibility_words
from swerl.trainer.setup.preflight import Preflight, run_preflight
from swerl.trainer.rollouts.quarantine import Quarantine
from swerl.trainer.step.reference import ReferencePolicy, make_reference
from swerl.trainer.rollouts.sampler import PromptSampler
from swerl.trainer.rollouts.sources import open_rollouts
from swerl.trainer.persistence.shared_dir import check_shared_run_dir
from swerl.trainer.tracking.trackers import open_trackers
from swerl.trainer.step.update import UpdateSettings, train_on_batch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from swerl.agent.collect import RolloutEvent
    from swerl.trainer.rollouts.runner import RolloutRunner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainEvent:
    """Progress for live displays (the CLI renders them; the library only logs).

    kind: ``plan`` (data: RunPlan), ``step_start`` (step, data: episodes this step),
    ``rollout`` (data: agent ``RolloutEvent``), ``phase`` (data: phase name),
    ``step_end`` (data: the step's metrics record).
    """

    kind: Literal["plan", "step_start", "rollout", "phase", "step_end"]
    step: int = 0
    data: RunPlan | RolloutEvent | int | str | dict[str, Any] | None = None


@dataclass
class TrainResult:
    """What a call to :func:`train` did.

    Attributes:
        run_dir: the run directory.
        steps_trained: training steps run by this call.
        last_step: global step reached (0 when nothing was ever trained).
        already_finished: the resumed checkpoint was already at the planned last step.
        records: the metrics records written by this call.
    """

    run_dir: Path
    steps_trained: int = 0
    last_step: int = 0
    already_finished: bool = False
    records: list[dict] = field(default_factory=list)


class StopSignal(KeyboardInterrupt):
    """SIGINT (Ctrl-C), SIGTERM or SIGHUP received in the main thread during :func:`train`: raised
    there like Ctrl-C, so every ``finally`` (sandbox drain, pipeline stop, metrics flush) runs.

    Attributes:
        signum: the signal's number (exit code 128 + signum).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP raise :class:`StopSignal` in the main thread (use as a context
    manager; elsewhere than the main thread a no-op). Inside :meth:`deferred` (a step's commit)
    the first signal is held until the block ends, so a step is committed whole or not at all;
    a second one raises at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._pending: int | None = None
        self._deferring = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: types.FrameType | None) -> None:
        if self._deferring and self._pending is None:
            self._pending = signum
            log.warning("%s: stopping once this step's commit is written (again to stop at once)",
                        signal.Signals(signum).name)
            return
        raise StopSignal(signum)

    @contextlib.contextmanager
    def deferred(self):  # noqa: ANN201 - Iterator[None]
        """A block a first signal does not interrupt; it raises StopSignal when the block ends."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if self._pending is not None and not self._deferring:
            raise StopSignal(self._pending)


@dataclass
class _Where:
    """Where a run is, for the line an interrupt prints: the step in progress (0: setup, before
    the first step) and its phase, as the loop's events say."""

    step: int = 0
    phase: str = "setup"
    total: int | None = None

    def see(self, event: TrainEvent) -> None:
        if event.kind == "plan":
            self.total = event.data.total_steps
        elif event.kind == "step_start":
            self.step, self.phase = event.step, "rollouts"
        elif event.kind == "phase":
            self.step, self.phase = event.step, event.data
        elif event.kind == "step_end":
            self.phase = "done"

    def interrupted(self, stop: StopSignal, run_dir: Path) -> Interrupted:
        """The interrupt's message: the signal, the step and phase reached, the last committed
        checkpoint (read from the run dir) and what a resume redoes."""
        found = ckpt.resolve_resume(run_dir, "latest") if (run_dir / CKPT_DIR).is_dir() else None
        saved = int(STEP_DIR_RE.match(found.name).group(1)) if found is not None else 0
        of = f"/{self.total}" if self.total else ""
        where = f"before step 1 ({self.phase})" if self.step == 0 else (
            f"after step {self.step}{of}" if self.phase == "done" else f"at step {self.step}{of} ({self.phase})")
        last = f"last checkpoint: step {saved} ({found})" if found is not None else "no checkpoint yet"
        name = signal.Signals(stop.signum).name
        return Interrupted(f"{name} {where}; {last}, a resume starts at step {saved + 1}",
                           exit_code=128 + stop.signum)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _sweep_dead_runs(config: TrainConfig) -> None:
    """Remove containers of dead swerl runs on every engine, as every sandbox start does (a run
    that trains nothing starts no sandbox); an unreachable engine is only logged here."""
    if not config.sandbox.gc_dead_runs:
        return
    from swerl.errors import SwerlError
    from swerl.sandbox.docker_api import connect
    from swerl.sandbox.deployment.gc import collect_garbage

    for engine in config.sandbox.engine_list():
        try:
            client = connect(engine.url, 2, config.sandbox.docker_timeout_s, engine.sdk_tls())
        except SwerlError as err:
            log.warning("dead runs' containers not removed: %s", err)
            continue
        try:
            collect_garbage(client)
        finally:
            client.close()


@dataclass
class _Run:
    """What the steps of one :func:`train` call work with: built by :func:`_prepare`, completed by
    :func:`_resume` (position) and :func:`_start_rollouts` (metrics sink, rollout pipeline)."""

    config: TrainConfig
    run_dir: Path
    info: dist.DistInfo
    emit: Callable[[TrainEvent], None]
    tasks: list
    held_out: list
    sampler: PromptSampler
    plan: RunPlan
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    model_path: Path
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    settings: UpdateSettings
    ckpt_path: Path | None
    reference: ReferencePolicy | None = None
    start_step: int = 0
    protect: frozenset[int] = frozenset()
    guard: MaskedGuard | None = None
    quarantine: Quarantine | None = None
    sink: MetricsSink | None = None
    clock: BusyClock = field(default_factory=BusyClock)
    result: TrainResult | None = None
    pending: list | None = None  # batches after start_step the resumed checkpoint saved (exact schedule)
    background: bool = False  # checkpointing.async_save resolved for this run's device
    writes: BackgroundWrites = field(default_factory=BackgroundWrites)  # started, not yet committed


def train(config: TrainConfig, run_dir: Path, resume: str | None = None, *,
          on_event: Callable[[TrainEvent], None] | None = None, checked: Preflight | None = None) -> TrainResult:
    """Run (or resume) a training run in ``run_dir``.

    Args:
        config: the validated config. run_dir: where config.yaml, metrics.jsonl, checkpoints/ and
            exports/ go. resume: None (fresh run; refuses a run_dir that already has checkpoints),
            ``latest`` or a checkpoint folder path. on_event: progress callback (rank 0 only).
            checked: ``run_preflight`` of these three (``swerl train`` passes its own; None: run here);
            the run starts from its config (``auto`` resolved), tasks, plan and checkpoint.
    Returns: TrainResult.
    Raises:
        Interrupted: SIGINT, SIGTERM or SIGHUP (in the main thread), after the run's cleanup; its
            message names the step reached and the last checkpoint. A step's commit is never cut
            by a first signal: it is written whole, then the run stops.
        ConfigError / TaskError / EnvironmentProblem / SandboxError: what the preflight refuses, a
            checkpoint that does not fit, Docker unusable. ValueError: ``checked`` of another run.
        RunFailed: the run trained zero steps although steps were planned.
    """
    checked = _preflight(config, Path(run_dir), resume, checked)  # checked.config: with auto resolved
    where = _Where()
    with StopSignals() as stops:
        try:
            return _train(checked, resume, where, stops, on_event)
        except StopSignal as stop:  # after every cleanup: one line, raised as Interrupted (exit 130/143)
            raise where.interrupted(stop, checked.run_dir) from None


def _train(checked: Preflight, resume: str | None, where: _Where, stops: StopSignals,
           on_event: Callable[[TrainEvent], None] | None) -> TrainResult:
    """:func:`train` from its preflight; ``where`` follows its events, ``stops`` holds a signal
    off each step's commit."""
    run = _prepare(checked, on_event, where)
    if _resume(run, resume):
        return run.result
    _say_what_a_stop_redoes(run)
    nonfinite = NonFiniteStreak(run.config.optimizer.max_consecutive_nonfinite_steps)
    with contextlib.ExitStack() as stack:
        stack.callback(run.writes.finish_on_exit)  # last: a signal or an error still commits what is written
        rollouts = _start_rollouts(run, stack)
        for step in range(run.start_step + 1, run.plan.total_steps + 1):
            t_step = time.monotonic()
            # Rollouts: the sampler's next batch of prompts (same order on every rank and after a resume), n
            # verified episodes each, all ranks get all; dynamic sampling refills groups without signal.
            run.emit(TrainEvent("step_start", step, run.plan.samples_per_step))
            batch = rollouts.take(step)
            timings: dict[str, float] = dict(batch.metrics)
            # Mostly-masked steps in a row stop the run; data.quarantine drops flagged tasks later.
            quarantined = _watch(run, step, batch)
            # Failure classes and advantages: masked rows leave the baseline, failures score 0.
            run.emit(TrainEvent("phase", step, "advantages"))
            advantages, adv_metrics, rows = _advantage_rows(run.config, batch.trajectories, step)
            # Update: pi_old at the sampling temperature, then micro-batched optimizer step(s).
            run.emit(TrainEvent("phase", step, "update"))
            t0 = time.monotonic()
            run.model.train()
            with run.clock.busy("update"):
                update_metrics = train_on_batch(run.model, run.optimizer, run.scheduler, rows, run.config.algorithm,
                                                run.settings, run.info, run.reference)
            run.model.eval()
            timings[metric_keys.TIMING_UPDATE_S] = time.monotonic() - t0
            # Weight sync to the generator between two requests, then the parity probe (stops the run
            # on stale weights); it admits the producer's next batches.
            sync_metrics = rollouts.publish(step)
            held_out_metrics = _held_out_eval(run, rollouts.runner, step)
            # Log and commit: one record per step, in the checkpoint and in metrics.jsonl.
            metrics = {**rollout_metrics(batch.generated), **adv_metrics, **update_metrics, **timings,
                       **held_out_metrics, **sync_metrics, **run.clock.fractions(t_step, time.monotonic()),
                       **quarantined, "epoch": float(batch.epoch)}
            # A checkpoint of the exact schedule keeps the next k batches, sampled by versions it lacks.
            pending = rollouts.pending(step) if step in run.plan.checkpoint_steps else []
            with stops.deferred():  # a signal now stops the run once the step is committed
                _commit(run, step, batch, rollouts.position(), metrics, advantages, t_step, pending)
            nonfinite.observe(step, update_metrics)  # K skipped optimizer steps in a row: RunFailed
        # The background writes of the last steps: on disk and committed before the run returns.
        with stops.deferred():
            run.writes.finish()
    # A run that was asked to train and trained nothing is a failure, not a success.
    if run.result.steps_trained == 0:
        raise RunFailed(
            f"trained 0 steps (planned {run.plan.total_steps}; {counted(len(run.tasks), 'task')}, train_batch_size "
            f"{run.config.loop.train_batch_size}): raise loop.max_steps/epochs or add tasks"
        )
    return run.result


def _preflight(config: TrainConfig, run_dir: Path, resume: str | None, checked: Preflight | None) -> Preflight:
    """``checked`` when it is the preflight of ``run_dir`` and ``resume``; None: the preflight run
    here, with what ``auto`` chose logged. Raises ValueError for another run's preflight."""
    if checked is None:
        checked = run_preflight(config, run_dir, resume)
        for line in checked.resolution.lines():
            log.info("%s", line)
    elif (checked.run_dir, checked.resume) != (run_dir, resume):
        raise ValueError(f"checked is the preflight of {checked.run_dir} (resume {checked.resume}), not of "
                         f"{run_dir} (resume {resume})")
    return checked


def _prepare(checked: Preflight, on_event: Callable[[TrainEvent], None] | None, where: _Where) -> _Run:
    """Setup from the preflight's findings: ranks, seeds, run directory, the prompt sampler, then
    the policy, its optimizer and LR schedule (in this order: the seeds fix the model's
    initialization), and the KL term's reference policy (the initial weights, before a resume
    loads a checkpoint)."""
    config, run_dir, tasks, plan = checked.config, checked.run_dir, checked.tasks, checked.plan
    info = dist.init_distributed(config.model.device,
                                 cpu_offload=config.model.cpu_offload or config.model.reference_cpu_offload)
    check_ranks_agree(config)  # each rank resolved auto on its own machine
    show = on_event if (on_event is not None and info.is_main) else (lambda event: None)

    def emit(event: TrainEvent) -> None:
        where.see(event)
        show(event)

    seed_everything(config.seed)
    if info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
    check_shared_run_dir(run_dir, info)  # one clear error now, not stranded DCP shards later

    sampler = PromptSampler(len(tasks), config.loop.train_batch_size, config.data_seed, config.data.shuffle)
    quarantine = None if config.data.quarantine is None else Quarantine(
        config.data.quarantine, [t.name for t in tasks], sampler, config.loop.max_staleness_steps)
    emit(TrainEvent("plan", data=plan))
    ds = config.algorithm.dynamic_sampling
    extra = (f" (dynamic sampling: up to {counted(ds.max_extra_rounds, 'extra round')} per step for the groups "
             "without signal)" if ds.enabled else "")
    log.info("plan: %s x %s x %s%s, %s", counted(plan.total_steps, "step"), counted(plan.prompts_per_step, "prompt"),
             counted(config.n_samples, "sample"), extra, counted(plan.total_optimizer_steps, "optimizer step"))
    log.info("reproducibility: %s", reproducibility_words(config))

    model, tokenizer, model_path = load_policy(config.model, info)
    optimizer, scheduler = build_optimizer(model, config.optimizer, max(plan.total_optimizer_steps, 1))
    settings = _update_settings(config, tokenizer)
    require_chunkable_head(model, settings.lm_head_chunk_tokens)
    pack_rows, pack_words = pack_choice(model, config.model.pack_rows, config.loop.micro_batch_size)
    settings = replace(settings, pack_rows=pack_rows)
    log.info("row packing: %s", pack_words)
    reference = make_reference(config.model, model, model_path, info, settings.temperature, settings.compute_dtype,
                               pack_rows) if config.algorithm.use_kl_loss else None
    background = resolve_async_save(config.checkpointing.async_save, info.device.type)
    log.info("checkpoints%s: written %s (checkpointing.async_save=%s)",
             "" if config.model.lora else " and HF exports",
             "in the background while the next step trains" if background else "before the next step starts",
             str(config.checkpointing.async_save).lower())
    return _Run(config, run_dir, info, emit, tasks, checked.held_out, sampler, plan, model, tokenizer, model_path,
                optimizer, scheduler, settings, checked.ckpt_path, reference, quarantine=quarantine,
                background=background)


def _update_settings(config: TrainConfig, tokenizer: PreTrainedTokenizerBase) -> UpdateSettings:
    """The policy update's settings from the config (padding with the tokenizer's pad or EOS id)."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    return UpdateSettings(
        temperature=config.agent.temperature,
        rows_per_mini_batch=(config.loop.mini_batch_size or config.loop.train_batch_size) * config.n_samples,
        micro_batch_size=config.loop.micro_batch_size,
        update_epochs=config.loop.update_epochs,
        grad_clip=config.optimizer.grad_clip,
        compute_dtype=compute_dtype(config.model),
        sharded=config.model.fsdp,
        sync_grads_every_micro_batch=config.model.grad_sync == "every_micro_batch",
        pad_id=pad_id,
        replay_support=config.algorithm.sampling_support == "replay",
        lm_head_chunk_tokens=configured_chunk_tokens(config.model.lm_head_chunk_tokens),
    )


def _resume(run: _Run, resume: str | None) -> bool:
    """Resume: weights, optimizer, scheduler, RNG, data position; the run dir made to match.

    Returns: True when the resumed checkpoint is already at the planned last step (nothing to
    train, no file of the run rewritten); else False, with ``config.yaml`` written.
    """
    config, info = run.config, run.info
    run.protect = frozenset(config.checkpointing.protect_steps)
    run.guard = MaskedGuard(config.loop.max_masked_fraction, config.loop.max_masked_steps)
    if run.ckpt_path is not None:
        state = ckpt.load_checkpoint(run.ckpt_path, run.model, run.optimizer, run.scheduler, info)
        run.sampler.load_state_dict(state["sampler"])
        if run.quarantine is not None and "quarantine" in state:
            run.quarantine.load_state_dict(state["quarantine"])
        run.start_step = int(state["global_step"])
        run.pending = _saved_batches(run, state)
        run.guard.streak = int(state.get("masked_streak", 0))
        run.protect |= {run.start_step}  # the checkpoint this run resumed from
        if info.is_main:
            commit.reconcile_run(run.run_dir, state, redo_after=run.start_step < run.plan.total_steps)
    elif resume is not None and info.is_main:  # killed before its first checkpoint: nothing was committed
        commit.reconcile_run(run.run_dir, {"global_step": 0}, redo_after=True)
    run.result = TrainResult(run_dir=run.run_dir, last_step=run.start_step)
    if run.start_step >= run.plan.total_steps and run.ckpt_path is not None:
        log.info("run already finished at global step %d of %d: nothing to train", run.start_step,
                 run.plan.total_steps)
        if info.is_main:
            _sweep_dead_runs(config)
        run.result.already_finished = True
        return True
    if info.is_main:
        # A resume says what differs from the run's config.yaml (e.g. auto resolved on another machine).
        changes = changes_since(run.run_dir / CONFIG_FILE, config) if run.ckpt_path is not None else []
        if changes:
            log.warning("resumed with a config that differs from the run's config.yaml: %s", "; ".join(changes))
        (run.run_dir / CONFIG_FILE).write_text(config.to_yaml())
    return False


def _saved_batches(run: _Run, state: dict[str, Any]) -> list[pipeline.RolloutBatch] | None:
    """The batches after the checkpoint that the exact schedule saved beside it, when this run
    goes on with that schedule (same k, same ranks); None otherwise, with a log line saying that
    they are collected again, sampled by the resumed weights."""
    loop, start = run.config.loop, int(state["global_step"])
    if loop.max_staleness_steps == 0 or not loop.exact_staleness or start >= run.plan.total_steps:
        return None
    wanted = list(range(start + 1, min(start + loop.max_staleness_steps, run.plan.total_steps) + 1))
    saved = ckpt.load_pending(run.ckpt_path, run.info.rank)
    same = (state.get("pipeline", {}).get("max_staleness_steps") == loop.max_staleness_steps
            and int(state.get("world_size", 1)) == run.info.world_size)
    if same and saved is not None and [b.step for b in saved[:len(wanted)]] == wanted:
        return saved[:len(wanted)]
    log.info("%s holds no batches %d-%d collected with loop.max_staleness_steps=%d on %d rank(s): they are collected "
             "again, sampled by the resumed weights (version %d), so this resume does not repeat the run bit for bit",
             run.ckpt_path, wanted[0], wanted[-1], loop.max_staleness_steps, run.info.world_size, start)
    return None


def _say_what_a_stop_redoes(run: _Run) -> None:
    """With checkpoints less often than every step, say at the start that an interrupt (or a
    crash) redoes the steps since the last checkpoint: a step is committed only by a checkpoint."""
    steps = [s for s in run.plan.checkpoint_steps if s > run.start_step]
    if run.info.is_main and len(steps) < run.plan.total_steps - run.start_step:
        log.info("checkpoints at steps %s only: a run stopped between two of them resumes from the last one and "
                 "redoes the steps after it (checkpointing.ckpt_interval: 1 commits every step)",
                 ", ".join(map(str, steps)) or "none")


def _start_rollouts(
    run: _Run, stack: contextlib.ExitStack
) -> pipeline.InlineRollouts | pipeline.PipelinedRollouts:
    """Open the metrics sink and trackers (rank 0), the generator and the rollout pipeline; their
    closing goes on ``stack``. The initial policy is evaluated on the held-out tasks when asked."""
    config, info = run.config, run.info
    trackers = open_trackers(config.logging, run.run_dir, config.model_dump(mode="json"), run.plan) if info.is_main else []
    run.sink = MetricsSink(run.run_dir, config.logging.tensorboard, trackers,
                           config.model_dump(mode="json")) if info.is_main else None
    stack.callback(lambda: run.sink.close() if run.sink is not None else None)
    # Generator: every rank's engine(s) and their weight sync. Rollouts of step k use the weights
    # after k - 1 steps (weight version k - 1); a resumed run pushes the checkpoint's weights first.
    generator = make_generator(config, run.model, run.tokenizer, run.model_path, run.run_dir, info)
    stack.callback(close_generator, generator)
    run.model.eval()
    if run.ckpt_path is not None:
        publish_weights(generator, run.model, config, info, version=run.start_step)
    else:
        probe_parity(generator, run.model, config, info)
    # Rollouts: batch s collected now (k = 0) or ahead of the trainer by a producer (k >= 1).
    rollouts = stack.enter_context(open_rollouts(pipeline.Context(
        config, run.tasks, run.sampler, generator, run.model, run.run_dir, info, run.clock,
        lambda at, ev: run.emit(TrainEvent("rollout", at, ev))), run.start_step, run.plan.total_steps, run.pending))
    if info.is_main and config.eval is not None and config.eval.before_train and run.start_step == 0:
        run.model.eval()  # the initial policy on the held-out tasks: a record at global_step 0
        run.emit(TrainEvent("phase", 0, "eval (before training)"))
        evaluated = run_eval(config.eval, rollouts.runner, run.held_out, 0, run.run_dir)
        run.result.records.append(run.sink.log(0, evaluated))
    return rollouts


def _watch(run: _Run, step: int, batch: pipeline.RolloutBatch) -> dict[str, float]:
    """The masked-steps guard (raises RunFailed) and the quarantine ledger see batch ``step``;
    returns the step's ``quarantine/*`` metrics."""
    run.guard.observe(step, batch.generated)  # every episode, dropped groups included: a mask hides nothing
    if run.quarantine is None:
        return {}
    return run.quarantine.observe(step, batch.epoch, batch.generated, batch.sampler_state)


def _held_out_eval(run: _Run, runner: RolloutRunner, step: int) -> dict[str, float]:
    """The held-out eval of the current weights when due at ``step`` (rank 0), else ``{}``."""
    if run.info.is_main and run.config.eval is not None and is_due(run.config.eval, step, run.plan.total_steps):
        run.emit(TrainEvent("phase", step, "eval (held-out)"))
        return run_eval(run.config.eval, runner, run.held_out, step, run.run_dir)
    return {}


def _advantage_rows(config: TrainConfig, trajs: list, step: int) -> tuple[torch.Tensor, dict[str, float], list]:
    """Advantages (N,) of the step's trajectories (masked rows left out of the baseline, failures
    scored 0), their ``advantage/*`` metrics (and, with ``algorithm.overlong_filter``,
    ``response_length/overlong_filtered_fraction``), and the update's rows (one per token sequence;
    step ``step`` trains the weights of version step - 1)."""
    algo = config.algorithm
    rewards = torch.tensor([effective_reward(t) for t in trajs], dtype=torch.float32)
    exclude = torch.tensor([excluded_from_baseline(t) for t in trajs], dtype=torch.bool)
    advantages, adv_metrics = compute_advantages(algo, rewards, group_index([t.group_id for t in trajs]), exclude)
    rows = [row for i, (t, a) in enumerate(zip(trajs, advantages))
            for row in rows_from_trajectory(t, float(a), algo.agent_failure_tokens, i,
                                            overlong_filter=algo.overlong_filter, trained_version=step - 1)]
    if algo.overlong_filter:  # episodes whose loss the filter masked (cut by their token budget)
        cut = sum(t.hit_length_limit and t.failure_class != "mask" for t in trajs)
        adv_metrics = {**adv_metrics, metric_keys.RESPONSE_LENGTH_OVERLONG_FILTERED_FRACTION: cut / max(len(trajs), 1)}
    return advantages, adv_metrics, rows


def _commit(run: _Run, step: int, batch: pipeline.RolloutBatch, position: dict[str, Any], metrics: dict[str, float],
            advantages: torch.Tensor, t_step: float, pending: list[pipeline.RolloutBatch]) -> None:
    """Commit the step: HF export, then the checkpoint holding the step's record (and the
    ``pending`` batches past it, when there are any), then metrics.jsonl (rank 0 writes;
    ``persistence/commit.py``); then one log line."""
    config, info, run_dir = run.config, run.info, run.run_dir
    if info.is_main:  # every episode's sample record (the task health ledger reads them), always
        write_sample_records(run_dir / ROLLOUTS_DIR / step_file_name(step), batch.generated, global_step=step,
                             epoch=batch.epoch)
    if info.is_main and config.logging.dump_trajectories:
        dump_trajectories(run_dir, step, batch.trajectories, [float(a) for a in advantages])
    if run.sink is not None:  # a few episodes for TensorBoard's text tab
        run.sink.log_episodes(step, batch.trajectories, [float(a) for a in advantages])
    if info.is_main:
        record_flagged(run_dir, step, batch.generated)
    trainer_state = {"sampler": batch.sampler_state, "epoch": batch.epoch, "masked_streak": run.guard.streak,
                     "pipeline": position}
    if run.quarantine is not None:
        trainer_state["quarantine"] = run.quarantine.state_dict()
    record = commit.commit_step(
        step, metrics, t_step,
        export=(lambda: _export(run, step, metrics)) if step in run.plan.export_steps else None,
        checkpoint=(lambda recs: _checkpoint(run, step, {**trainer_state, commit.RECORDS_KEY: recs}, pending))
        if step in run.plan.checkpoint_steps else None,
        append=run.sink.append if run.sink is not None else None,
    )
    if run.sink is not None:
        run.result.records.append(record)
        run.emit(TrainEvent("step_end", step, record))
        kept = metrics.get(metric_keys.DYNAMIC_SAMPLING_GROUPS_KEPT)
        log.info(
            "step %d/%d | reward %.3f | pass@n %.2f | loss %.4f | grad %.3f | %.1fs%s",
            step, run.plan.total_steps, metrics[metric_keys.REWARD_AVG_RAW_REWARD],
            metrics[metric_keys.REWARD_AVG_PASS_AT_N],
            metrics.get(metric_keys.LOSS_POLICY, 0.0), metrics["grad_norm"], metrics[metric_keys.TIMING_STEP_S],
            "" if kept is None else (  # dynamic sampling: what the step trained on, of what it drew
                f" | kept {kept:.0f} of {kept + metrics.get(metric_keys.DYNAMIC_SAMPLING_GROUPS_DROPPED, 0.0):.0f} groups "
                f"with signal (+{metrics.get(metric_keys.DYNAMIC_SAMPLING_ROUNDS, 0.0):.0f} rounds)"),
        )
    run.result.steps_trained += 1
    run.result.last_step = step


def _export(run: _Run, step: int, metrics: dict[str, float]) -> None:
    """The HF export of ``step`` (every rank): written now, or, with ``checkpointing.async_save``,
    started in the background once the previous export is committed (``persistence/background.py``)."""
    config = run.config
    args = (run.run_dir, step, run.model, run.tokenizer, run.info)
    kwargs = dict(metrics=metrics, dtype=getattr(torch, config.model.dtype), merged=config.checkpointing.export_merged)
    if not run.background:
        hf_export.export_hf(*args, **kwargs)
        return
    run.writes.finish("export")
    with phase("export"):
        run.writes.add(hf_export.start_export(*args, **kwargs, background=True))


def _checkpoint(run: _Run, step: int, trainer_state: dict[str, Any], pending: list[pipeline.RolloutBatch]) -> None:
    """The checkpoint of ``step`` (every rank): written and committed now, or, with
    ``checkpointing.async_save``, started in the background once the previous checkpoint (and
    every write before it) is committed; its rename then waits for the next one, the run's end or
    its stop."""
    config = run.config
    args = (run.run_dir, step, run.model, run.optimizer, run.scheduler, trainer_state, config.to_yaml(), run.info,
            config.checkpointing.keep_last, run.protect)
    if not run.background:
        ckpt.save_checkpoint(*args, pending=pending or None)
        return
    run.writes.finish("checkpoint")
    with phase("checkpoint save"):
        run.writes.add(ckpt.start_checkpoint(*args, pending=pending or None, background=True))
