"""Preflight of ``swerl train``: what the real run would reject, checked before its first step and
before any file of the run is written. ``--dry-run`` runs exactly these checks, so a dry-run that
passes is a run that starts.

Checks, in order (each raises one one-line :class:`SwerlError`):

0. the device: ``model.device`` names a device this machine has (``cuda`` needs a GPU) (2);
1. the task sources exist (``ConfigError`` naming the fix, exit 2), the tasks load (``TaskError``, 2)
   and the plan trains at least one step (``ConfigError``, 2);
2. the run directory: checkpoints without ``--resume``, ``--resume`` without checkpoints (2);
3. model files: ``model.path`` is an HF folder or a ``.gguf`` file, or the default model package
   is installed (2 for a bad path, 3 for a missing default package);
4. backends: ``vllm`` importable when ``generator.backend`` is vllm (3);
5. disk: free bytes under the run directory >= the checkpoints and exports the plan keeps (2);
6. Docker: the engine answers (3) and every image the tasks build ``FROM`` is on it (3).

Not errors, but notes (the dry-run prints them, the run logs them as warnings): no parameter count
yet (the model is converted at the first run), and CPU oversubscription (:func:`check_cores`).

What the checks load and make (the config with ``auto`` resolved, the tasks, the plan, the
checkpoint to resume) is the :class:`Preflight` that ``train()`` starts from: the tasks load once,
the plan is made once, and each refusal above is written here only.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from swerl.errors import ConfigError, EnvironmentProblem
from swerl.inference.config import HFGenerator
from swerl.text import counted
from swerl.trainer.setup.auto import Resolution, resolve_auto
from swerl.trainer.config import TrainConfig
from swerl.trainer.setup.model_size import exact_param_count, model_shape, model_size, param_count
from swerl.trainer.setup.plan import RunPlan, format_bytes, make_plan, stored_bytes

log = logging.getLogger(__name__)


@dataclass
class Preflight:
    """What the checks found: everything ``train()`` needs to start the run they checked.

    Attributes:
        config: the config with ``auto`` resolved for this machine (what the run trains with).
        resolution: what ``auto`` chose and why (the dry-run prints it, the run logs it).
        run_dir: the run directory checked. resume: the ``--resume`` value checked (None: a fresh run).
        ckpt_path: the checkpoint folder ``resume`` names (None for a fresh run, or ``--resume
            latest`` before the first checkpoint).
        tasks: the training tasks (after ``data.names`` / ``data.limit`` / ``data.exclude``).
        held_out: the ``eval`` section's tasks ([] without one).
        plan: the run plan over ``tasks``.
        disk_needed_bytes: checkpoints + exports the plan keeps at once (None: parameter count unknown).
        disk_free_bytes: free bytes on the run directory's file system.
        images: the base images the tasks need, all present.
        notes: checks that could not run (e.g. no parameter count for a GGUF not yet converted).
    """

    config: TrainConfig
    resolution: Resolution
    run_dir: Path
    resume: str | None
    ckpt_path: Path | None
    tasks: list
    held_out: list
    plan: RunPlan
    disk_needed_bytes: int | None = None
    disk_free_bytes: int = 0
    images: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def launch_world_size() -> int:
    """Processes of this launch: torchrun's ``WORLD_SIZE`` (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def run_preflight(cfg: TrainConfig, run_dir: Path, resume: str | None, world_size: int | None = None) -> Preflight:
    """Resolve ``auto`` for this machine, then run every check for the resolved config in
    ``run_dir``; returns what they found (the plan for a launch on ``world_size`` processes,
    default :func:`launch_world_size`).

    Raises:
        TaskError / ConfigError: (exit 2) bad tasks (or a network allowlist with sandbox.allow_network),
            a 0-step plan, a run directory at odds with ``--resume``, a bad model path, too little disk,
            a config that ``auto`` made invalid.
        EnvironmentProblem: (exit 3) missing default model package, vllm, a tracker's package (wandb, mlflow),
            Docker, or a base image.
    """
    from swerl.sandbox.network import check_network
    from swerl.tasks.exclude import load_without_excluded
    from swerl.tasks.load import load_tasks
    from swerl.trainer.tracking.trackers import check_tracker_packages

    from swerl.inference.machine import device_problem

    problem = device_problem("model.device", cfg.model.device)  # before auto probes a device that is not there
    if problem is not None:
        raise ConfigError(problem)
    resolution = resolve_auto(cfg)
    cfg = resolution.config
    check_task_source("data.tasks", cfg.data.tasks)
    tasks, _ = load_without_excluded(cfg.data.tasks, limit=cfg.data.limit, names=cfg.data.names,
                                     exclude=cfg.data.exclude)
    held_out = []
    if cfg.eval is not None:
        check_task_source("eval.tasks", cfg.eval.tasks)
        held_out = list(load_tasks(cfg.eval.tasks, limit=cfg.eval.limit, names=cfg.eval.names,
                                   names_field="eval.names"))
    check_network([*tasks, *held_out], cfg.sandbox)
    plan = make_plan(cfg, len(tasks), launch_world_size() if world_size is None else world_size)
    if plan.total_steps == 0:
        raise ConfigError(
            f"the plan trains 0 steps: {counted(len(tasks), 'task')} in {cfg.data.tasks} < loop.train_batch_size="
            f"{cfg.loop.train_batch_size}; lower loop.train_batch_size or add tasks"
        )
    ckpt_path = check_run_dir(run_dir, resume)
    model_folder = check_model(cfg.model.path)
    check_backend(cfg)
    check_tracker_packages(cfg.logging.wandb is not None, cfg.logging.mlflow is not None)
    result = Preflight(cfg, resolution, Path(run_dir), resume, ckpt_path, tasks, held_out, plan)
    if resume == "latest" and ckpt_path is None:
        result.notes.append(f"--resume latest: {run_dir} holds no checkpoint yet, so the run starts at step 1")
    result.notes.extend(check_cores(cfg, tasks))
    size_memory_and_time(cfg, plan, tasks, run_dir, result)
    check_disk(cfg, plan, run_dir, model_folder, result)
    result.images = check_docker(cfg, tasks)
    result.notes.extend(check_sandbox_disk(cfg, tasks))
    return result


def check_task_source(field_name: str, source: str) -> None:
    """A task source that does not exist yet fails naming the field and how to make the tasks:
    a HumanEval-looking path gets the exact ``swerl tasks import humaneval`` command."""
    path = Path(source).expanduser()
    if path.exists():
        return
    where = source if path.is_absolute() else f"{source} (relative to {Path.cwd()})"
    if "humaneval" in path.name.lower():
        fix = f"run: swerl tasks import humaneval {source}"
    else:
        fix = ("make task folders there (e.g. swerl tasks import humaneval DIR; the task format is in "
               "docs/tasks.md) or point it at a folder of tasks or a .parquet/.jsonl dataset")
    raise ConfigError(f"{field_name}: {where} does not exist; {fix}")


def check_run_dir(run_dir: Path, resume: str | None) -> Path | None:
    """A fresh run needs a run directory without checkpoints; ``--resume`` needs one to resume from.

    Returns: the checkpoint folder to resume from (None: a fresh run, or ``latest`` before the first
    checkpoint)."""
    from swerl.trainer.persistence import checkpoint as ckpt

    if resume is None and ckpt.list_checkpoints(run_dir / ckpt.CKPT_DIR):
        raise ConfigError(f"{run_dir} already holds checkpoints: pass --resume latest, or another --out")
    return ckpt.resolve_resume(run_dir, resume)


def check_model(spec: str | None) -> Path | None:
    """``model.path`` names an HF folder (with ``config.json``) or a ``.gguf`` file; None needs the
    default model package. Nothing is converted here. Returns the HF folder when one exists already."""
    from swerl.inference.model_files import converted_dir, default_gguf_path, resolve_model

    if spec is None:
        gguf = default_gguf_path()
        return converted_dir(gguf) if (converted_dir(gguf) / "config.json").is_file() else None
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return converted_dir(path) if (converted_dir(path) / "config.json").is_file() else None
    try:
        return resolve_model(path)  # an HF folder, or the one-line error the run would raise
    except ConfigError as err:  # name the field, and where a relative path was looked for
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        raise ConfigError(f"model.path{where}: {err}") from err


def check_backend(cfg: TrainConfig) -> None:
    """The generator's package is importable (found without importing it: ``import vllm`` takes seconds)."""
    if cfg.generator.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        from swerl.inference.engines.vllm_backend import VLLM_FIX

        raise EnvironmentProblem(f"generator.backend=vllm needs the vllm package, which is not installed; fix: {VLLM_FIX}")


OVERSUBSCRIBED = 8.0  # sandbox cpus / cores above which the run mostly waits for CPU: task cpus are
# limits, and an episode's sandbox idles while the policy generates its turn


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. under ``taskset`` or a cgroup cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def check_cores(cfg: TrainConfig, tasks: list) -> list[str]:
    """One warning when the generator's threads exceed the local cores, or episodes in flight x task
    cpus exceed them :data:`OVERSUBSCRIBED` times over (sandboxes on remote engines do not count).
    Not an error.

    Returns: [] or [the warning line].
    """
    if any(str(e.url or "unix://").split("://")[0] not in ("unix", "npipe") for e in cfg.sandbox.engine_list()):
        return []
    cores = usable_cores()
    gen = cfg.generator
    threads = 0  # vLLM's engines: their own cores (generator.cpu_cores)
    if isinstance(gen, HFGenerator):
        threads = gen.num_threads or (cores if cfg.model.device == "cpu" else 0)
    in_flight = cfg.loop.rollout_concurrency or cfg.sandbox.concurrency
    cpus = max((t.config.environment.cpus for t in tasks), default=1.0)
    demand = threads + in_flight * cpus
    if threads <= cores and in_flight * cpus <= OVERSUBSCRIBED * cores:
        return []
    return [f"CPU oversubscribed: {counted(threads, 'generator thread')} + {counted(in_flight, 'episode')} in flight x {cpus:g} task "
            f"cpus = {demand:g} cores wanted on {cores} usable; lower loop.rollout_concurrency (or "
            "sandbox.concurrency), generator.num_threads, or the tasks' cpus"]


def size_memory_and_time(cfg: TrainConfig, plan: RunPlan, tasks: list, run_dir: Path, result: Preflight) -> None:
    """The plan's peak RAM rows (``trainer/setup/memory.py``) and wall-time row; a note when the RAM
    available now is short."""
    from swerl.trainer.setup.memory import available_ram_bytes, estimate_memory, memory_lines, ram_note, time_line

    shape, num_params, _ = model_size(cfg.model.path)
    if shape is not None and num_params is not None and tasks:
        sandbox_mb = max(t.config.environment.memory_mb for t in tasks)
        est = estimate_memory(cfg, shape, num_params, [t.instruction for t in tasks], sandbox_mb)
        plan.placement.extend(memory_lines(est, cfg))
        result.notes.extend(ram_note(est, available_ram_bytes()))
    plan.placement.append(time_line(plan.samples_per_step, plan.total_steps, run_dir, cfg.model.path))


def checkpoints_at_peak(cfg: TrainConfig, plan: RunPlan) -> int:
    """Checkpoints on disk at once at the peak: ``keep_last`` + 1 while the next one is written
    (the oldest is deleted after it), or every checkpoint when ``keep_last`` is None."""
    kept = len(plan.checkpoint_steps)
    if cfg.checkpointing.keep_last is not None:
        kept = min(kept, cfg.checkpointing.keep_last + 1)
    return kept


def disk_needed(cfg: TrainConfig, plan: RunPlan, num_params: int, shape: dict) -> int:
    """Peak bytes of the run's checkpoints (:func:`checkpoints_at_peak`) and every export (a LoRA
    run's: adapters, ``plan.stored_bytes``)."""
    checkpoint, export = stored_bytes(cfg, shape, num_params)
    return checkpoints_at_peak(cfg, plan) * checkpoint + len(plan.export_steps) * export


def check_disk(cfg: TrainConfig, plan: RunPlan, run_dir: Path, model_folder: Path | None, result: Preflight) -> None:
    """Free space on the run directory's file system covers :func:`disk_needed`."""
    existing = Path(run_dir).absolute()
    while not existing.exists():
        existing = existing.parent
    result.disk_free_bytes = shutil.disk_usage(existing).free
    shape = model_shape(str(model_folder)) if model_folder is not None else None
    if shape is None:
        result.notes.append("model not converted yet (the first run converts it): no parameter count, free disk "
                            "not checked")
        return
    num_params = exact_param_count(model_folder) or param_count(shape)
    result.disk_needed_bytes = need = disk_needed(cfg, plan, num_params, shape)
    if need > result.disk_free_bytes:
        raise ConfigError(
            f"{run_dir}: the plan keeps {format_bytes(need)} of checkpoints and exports but {existing} has "
            f"{format_bytes(result.disk_free_bytes)} free; set checkpointing.keep_last, raise hf_save_interval, "
            "or pick another --out"
        )


def check_sandbox_disk(cfg: TrainConfig, tasks: list) -> list[str]:
    """One note when the first engine's free disk holds fewer trials at once than the run keeps in
    flight: every trial reserves its task's ``storage_mb`` there until its containers are removed
    (``sandbox/deployment/admission.py``), so the others wait. [] for engines this host cannot
    measure (remote) and when the disk covers them all. Not an error."""
    from swerl.sandbox.deployment.limits import data_root, free_disk
    from swerl.sandbox.docker_api import connect

    engine = cfg.sandbox.engine_list()[0]
    if not tasks or str(engine.url or "unix://").split("://")[0] != "unix":
        return []
    client = connect(engine.url, 2, cfg.sandbox.docker_timeout_s, engine.sdk_tls())
    try:
        free = free_disk(data_root(client))
    finally:
        client.close()
    in_flight = cfg.loop.rollout_concurrency or cfg.sandbox.concurrency
    budget = max(t.config.environment.storage_mb for t in tasks)
    if free is None or free.mib >= in_flight * budget:
        return []
    fits = free.mib // budget
    return [f"sandbox disk: Docker's data root {free.root} has {free.mib:,} MiB free{free.said}, which holds "
            f"{counted(fits, 'trial')} of the tasks' storage_mb = {budget} at once, not the {in_flight} in flight: "
            "the others wait for disk; lower [environment] storage_mb of the tasks, free disk, or lower "
            "sandbox.concurrency"]


def check_docker(cfg: TrainConfig, tasks: list) -> list[str]:
    """The Docker engine answers and holds every image the tasks (and their separate verifiers) build
    ``FROM`` or name prebuilt.

    Returns: the image references checked. Raises EnvironmentProblem (exit 3).
    """
    import docker

    from swerl.sandbox.docker_api import connect
    from swerl.sandbox.deployment.images import from_images

    refs: dict[str, Path] = {}
    for task in tasks:
        dockerfile = task.dockerfile
        names = [task.config.environment.docker_image] if dockerfile is None else (
            from_images(dockerfile) if dockerfile.is_file() else [])
        if task.verifier_image == "docker_image":  # a separate verifier's own image, prebuilt or built FROM one
            names.append(task.config.verifier_environment.docker_image)
        elif task.verifier_image == "tests_dockerfile":
            names += from_images(task.tests_dir / "Dockerfile")
        for ref in names:
            refs.setdefault(ref, task.path)
    engine = cfg.sandbox.engine_list()[0]  # the other engines of a fleet get missing FROM images from a peer
    client = connect(engine.url, 2, cfg.sandbox.docker_timeout_s, engine.sdk_tls())
    try:
        for ref, task_path in refs.items():
            try:
                client.images.get(ref)
            except docker.errors.ImageNotFound:
                raise EnvironmentProblem(
                    f"image {ref} (needed by {task_path}) is not on the Docker engine; fix: `swerl sandbox build-base` "
                    f"for the offline python:3.1x-slim images, or `docker pull {ref}`"
                ) from None
    finally:
        client.close()
    return sorted(refs)
