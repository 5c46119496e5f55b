"""``swerl train``: the preflight, the dry-run plan, and the run behind a live view of its steps."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from swerl import metric_keys
from swerl.cli.common import (JsonOut, Verbose, err_console, output_folder_callback, results_console, swerl_program,
                              write_json)
from swerl.errors import Interrupted, SwerlError
from swerl.text import counted

# The dry-run plan off a terminal (a pipe, `> plan.txt`): wrapped to fit a 100-column page.
PLAN_WIDTH = 100


def train_cmd(
    config: Annotated[Path, typer.Argument(help="YAML TrainConfig (see examples/*.yaml).")],
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", help="Override a field: dotted.key=YAML value (repeatable), e.g. optimizer.lr=1e-5.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Run the preflight (what the run would reject fails here, docs/cli.md), print the "
        "resolved config and the run plan, and exit.")] = False,
    resume: Annotated[Optional[str], typer.Option(
        help="Resume from 'latest' (the run dir's newest checkpoint) or a checkpoints/global_step_N folder.")] = None,
    run_dir: Annotated[Optional[Path], typer.Option(
        "--out", "-o", "--run-dir", callback=output_folder_callback, help="Run directory (default runs/<config file stem>).")] = None,
    concurrency: Annotated[Optional[int], typer.Option(
        "--concurrency", "-c", min=1, help="Episodes (sandboxes) in flight at once: sets loop.rollout_concurrency.")] = None,
    seeds: Annotated[Optional[str], typer.Option(
        "--seeds", metavar="S,S,...", help="Seed replicas: one run per seed, one after the other, each in "
        "RUN_DIR/seed<S> with seed=S (swerl report and swerl compare group them into one arm).")] = None,
    json_out: JsonOut = None,
    verbose: Verbose = False,
) -> None:
    """Train a policy with RLOO-n on tasks in Docker sandboxes; checkpoints, exports and metrics.jsonl in the run dir.

    Data parallel: launch with `torchrun --nproc_per_node N -m swerl.cli train CONFIG`.
    """
    from swerl.trainer.config import load_train_config

    overrides = [*(set_ or []), *([f"loop.rollout_concurrency={concurrency}"] if concurrency else [])]
    target = run_dir or Path("runs") / config.stem
    replicas = _replica_runs(seeds, target, resume)
    results = []
    for seed, replica_dir in replicas:
        cfg = load_train_config(config, overrides + ([f"seed={seed}"] if seed is not None else []))
        if seed is not None:
            err_console.print(f"seed replica {seed}: {replica_dir}", highlight=False)
        try:
            results.append(_train_one(cfg, replica_dir, resume, dry_run, None if seed is not None else json_out))
        except Interrupted as stop:  # Ctrl-C, SIGTERM: the line ends with the command that resumes
            raise stop.with_resume(resume_command(config, target, set_ or [], concurrency, seeds)) from None
    if seeds is not None:
        write_json(json_out, results)


def resume_command(config: Path, target: Path, sets: list[str], concurrency: int | None, seeds: str | None) -> str:
    """The ``swerl train`` command line that resumes this run (every replica with ``--seeds``):
    the same config, run dir and overrides, with ``--resume latest``; quoted for a POSIX shell."""
    import shlex

    words = ["train", str(config), "--run-dir", str(target)]
    for kv in sets:
        words += ["--set", kv]
    if concurrency:
        words += ["--concurrency", str(concurrency)]
    if seeds is not None:
        words += ["--seeds", seeds]
    return " ".join([swerl_program(), *map(shlex.quote, [*words, "--resume", "latest"])])


def _replica_runs(seeds: str | None, target: Path, resume: str | None) -> list[tuple[int | None, Path]]:
    """(seed, run dir) of each run: ``[(None, target)]`` without ``--seeds``, else one per seed
    in ``target/seed<S>``. Raises ConfigError for a bad list, or what cannot apply to several runs."""
    from swerl.errors import ConfigError

    if seeds is None:
        return [(None, target)]
    try:
        values = [int(part) for part in seeds.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--seeds {seeds}: give integers separated by commas, e.g. --seeds 0,1,2") from None
    if not values or len(set(values)) < len(values):
        raise ConfigError(f"--seeds {seeds}: give distinct integers separated by commas, e.g. --seeds 0,1,2")
    if resume not in (None, "latest"):
        raise ConfigError("--seeds with --resume: only 'latest' applies to every replica's run dir")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("--seeds under torchrun: launch one torchrun per seed with --set seed=S --out RUN_DIR/seedS")
    return [(seed, target / f"seed{seed}") for seed in values]


def _train_one(cfg, target: Path, resume: str | None, dry_run: bool, json_out: str | None) -> dict:  # noqa: ANN001
    """The preflight, then the dry-run plan or the run (rank 0 behind the live view); the result's JSON."""
    from swerl.logs import hold_records
    from swerl.trainer.setup.preflight import run_preflight

    held = hold_records()  # the preflight's warnings (e.g. a skipped task) go to train.log once it exists
    try:
        # What the run would reject fails here, before any file: auto (model.dtype, generator.backend)
        # resolved for this machine first, then the checks on the resolved config; torchrun's
        # WORLD_SIZE sizes the plan. The run starts from what they loaded (tasks, plan, checkpoint).
        checks = run_preflight(cfg, target, resume)
        for line in checks.resolution.lines():  # after the preflight: bad input stays one line
            logging.getLogger("swerl.cli").info("%s", line)
    finally:
        earlier = held.take()
    cfg = checks.config
    if dry_run:
        return _train_dry_run(checks, json_out)
    if os.environ.get("RANK", "0") != "0":  # torchrun: other ranks train quietly, rank 0 shows and reports
        import contextlib

        from swerl.logs import set_phase_display
        from swerl.trainer.loop import train

        set_phase_display(lambda clock: contextlib.nullcontext())
        train(cfg, target, resume, checked=checks)
        return {}
    from swerl.logs import attach_run_log, detach_run_log

    run_log = attach_run_log(target, earlier)  # RUN_DIR/train.log: every record of the run, warnings first
    try:
        for note in [*checks.plan.notes, *checks.notes]:  # the dry-run prints them; the run logs them
            logging.getLogger("swerl.cli").warning("%s", note)
        from swerl.trainer.loop import train  # torch, transformers: their import-time warnings land here too

        result = _train_with_live_view(checks, train)
    finally:
        detach_run_log(run_log)
    payload = {"run_dir": str(target), "steps_trained": result.steps_trained, "last_step": result.last_step,
               "already_finished": result.already_finished, "last_record": (result.records or [None])[-1]}
    write_json(json_out, payload)
    console = results_console(json_out)
    if result.already_finished:
        console.print(f"run already finished at global step {result.last_step}: nothing to train ({target})")
        return payload
    console.print(f"trained {counted(result.steps_trained, 'step')}, global step {result.last_step}; run dir {target}")
    _print_verdict(console, target)
    if cfg.logging.wandb is not None or cfg.logging.mlflow is not None:
        _log_selection_to_trackers(cfg, target)
    return payload


def _print_verdict(console, run_dir: Path) -> None:  # noqa: ANN001 - rich Console
    """Did it learn? The headline, its evidence and the next commands (swerl.report.verdict)."""
    from swerl.report.runs import load_run
    from swerl.report.verdict import run_verdict

    try:
        verdict = run_verdict(load_run(run_dir), program=swerl_program())  # works without an activated venv
    except SwerlError as err:
        logging.getLogger("swerl.cli").warning("no verdict for the run: %s", err)
        return
    console.print(f"[bold]Did it learn?[/] {escape(verdict.headline)}", highlight=False)
    for line in verdict.lines:
        console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
    console.print("next:", highlight=False)
    for command in verdict.next_commands:
        console.print(f"  {escape(command)}", highlight=False, soft_wrap=True)


def _log_selection_to_trackers(cfg, run_dir: Path) -> None:  # noqa: ANN001 - TrainConfig
    """Give the run's trackers the checkpoint `swerl select-checkpoint` would pick (if any)."""
    from swerl.selection import select_checkpoint
    from swerl.trainer.tracking.trackers import log_selection

    try:
        sel = select_checkpoint(run_dir, skip_bad_lines=True)
    except SwerlError as err:
        logging.getLogger("swerl.cli").warning("no checkpoint selection for the trackers: %s", err)
        return
    if sel.chosen is not None:
        log_selection(cfg.logging, run_dir, {"step": sel.chosen.step, "ema": sel.chosen.ema, "metric": sel.metric,
                                             "span": sel.span, "export_path": sel.chosen.export_path})


def _train_dry_run(checks, json_out: str | None) -> dict:  # noqa: ANN001 - Preflight
    """Print the resolved config (YAML), the run plan, what ``auto`` chose and why, and what the preflight
    checked; return the JSON payload."""
    from rich.table import Table

    from swerl.trainer.setup.plan import format_bytes
    from swerl.trainer.setup.preflight import checkpoints_at_peak

    cfg, run_dir, plan = checks.config, checks.run_dir, checks.plan
    console = results_console(json_out)
    console.print(cfg.to_yaml(), highlight=False, markup=False)
    table = Table(title=f"run plan ({run_dir})", title_justify="left")
    table.add_column("item")
    table.add_column("value")  # left: long values wrap off a terminal
    need = checks.disk_needed_bytes
    peak, keep = checkpoints_at_peak(cfg, plan), cfg.checkpointing.keep_last
    keep_note = f": keep_last {keep} + 1 while saving" if keep is not None and peak == keep + 1 else ""
    rows = [
        ("tasks", str(plan.num_tasks)),
        ("steps per epoch", str(plan.steps_per_epoch)),
        ("training steps", str(plan.total_steps)),
        ("prompts / step", str(plan.prompts_per_step)),
        ("samples / prompt", str(cfg.n_samples)),
        ("samples / step", str(plan.samples_per_step)),
        ("optimizer steps / step", str(plan.optimizer_steps_per_step)),
        ("optimizer steps total", str(plan.total_optimizer_steps)),
        ("max tokens / episode", f"{plan.max_tokens_per_episode:,}"),
        ("token budget / step (max)", f"{plan.token_budget_per_step:,}"),
        ("token budget total (max)", f"{plan.token_budget_per_step * plan.total_steps:,}"),
        ("checkpoint steps", ", ".join(map(str, plan.checkpoint_steps)) or "none"),
        ("export steps", ", ".join(map(str, plan.export_steps)) or "none"),
        *checks.resolution.rows(),
        *plan.placement,
        ("disk: peak of checkpoints + exports", "unknown" if need is None else (
            f"{format_bytes(need)} ({counted(peak, 'checkpoint')} at once"
            f"{keep_note}, {counted(len(plan.export_steps), 'export')})")),
        ("disk: free under the run dir", format_bytes(checks.disk_free_bytes)),
        ("base images present", ", ".join(checks.images) or "none needed"),
    ]
    for item, value in rows:
        table.add_row(item, value)
    console.print(table, width=None if console.is_terminal else PLAN_WIDTH)
    for note in [*plan.notes, *checks.notes]:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    payload = {"config": cfg.model_dump(mode="json"), "plan": plan.model_dump(mode="json"),
               "disk_needed_bytes": need, "disk_free_bytes": checks.disk_free_bytes,
               "images": checks.images, "notes": [*plan.notes, *checks.notes], "auto": checks.resolution.as_dict()}
    write_json(json_out, payload)
    return payload


def _train_with_live_view(checks, train):  # noqa: ANN001, ANN202 - Preflight, loop.train
    """Run ``train`` from the preflight ``checks`` behind a rich progress bar (episodes of the
    step) and one line per step."""
    from swerl.cli.progress import RolloutTally, new_progress, phases_into
    from swerl.logs import PhaseClock, command_heartbeat

    state = {"total": "?", "last": "", "tally": RolloutTally()}
    clock = PhaseClock()  # off a terminal: a heartbeat line every 30 s says which phase runs
    clock.start("setup (policy, generator, sandboxes)")
    heartbeat = command_heartbeat(clock, enabled=not err_console.is_terminal)  # names checkpoint saves, exports
    with new_progress(err_console) as progress, phases_into(progress), heartbeat:
        bar = progress.add_task("train", total=None, status="loading...")

        def on_event(event) -> None:  # noqa: ANN001 - swerl.trainer.loop.TrainEvent
            if event.kind == "plan":
                state["total"] = str(event.data.total_steps)
            elif event.kind == "step_start":
                state["tally"] = RolloutTally()
                clock.start("rollouts", total=event.data, unit="episodes", scope=f"step {event.step}/{state['total']}")
                progress.reset(bar, total=event.data, completed=0)
                progress.update(bar, description=f"step {event.step}/{state['total']}",
                                status=f"rollouts  {state['last']}")
            elif event.kind == "rollout":  # an episode started, went to its verifier, or finished
                tally = state["tally"]
                tally.observe(event.data)
                if event.data.total > (clock.total or 0):  # dynamic sampling's extra round: more episodes
                    clock.total = event.data.total
                    progress.update(bar, total=event.data.total)
                clock.advance(event.data.done)
                clock.note = f"{len(tally.verifying)} verifying" if tally.verifying else ""
                progress.update(bar, completed=event.data.done, status=f"{tally.status()}  {state['last']}")
            elif event.kind == "phase":  # step 0: before the first step (eval before training)
                clock.start(event.data, scope=f"step {event.step}/{state['total']}" if event.step else "")
                progress.update(bar, status=f"{event.data}  {state['last']}")
            elif event.kind == "step_end":
                r = event.data
                state["last"] = (f"| last: reward {r[metric_keys.REWARD_AVG_RAW_REWARD]:.3f} pass@n "
                                 f"{r[metric_keys.REWARD_AVG_PASS_AT_N]:.2f} "
                                 f"loss {r.get(metric_keys.LOSS_POLICY, 0.0):.4f} "
                                 f"grad {r['grad_norm']:.3f} {r[metric_keys.TIMING_STEP_S]:.1f}s")
                if metric_keys.DYNAMIC_SAMPLING_ROUNDS in r:  # groups with signal kept, extra rounds spent
                    state["last"] += (f" kept {r[metric_keys.DYNAMIC_SAMPLING_GROUPS_KEPT]:.0f} groups "
                                      f"(+{r[metric_keys.DYNAMIC_SAMPLING_ROUNDS]:.0f} rounds)")
                clock.start("done", scope=f"step {event.step}/{state['total']}")  # then the next batch, or teardown
                progress.update(bar, status=f"done  {state['last']}")

        return train(checks.config, checks.run_dir, checks.resume, on_event=on_event, checked=checks)
