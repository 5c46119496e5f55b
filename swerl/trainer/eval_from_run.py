"""``swerl eval --from-run RUN_DIR [--step N]``: evaluate an export of a training run with the
run's own protocol, episode limits, sampling and generator, read from ``RUN_DIR/config.yaml``.

Stage: ``trainer/`` (reads a run directory) building the ``agent`` stage's ``EvalConfig``.
The export is ``RUN_DIR/exports/global_step_N``; without ``--step`` it is the step that
``swerl select-checkpoint`` picks (trailing EMA of ``reward/avg_raw_reward``), else the latest
export. ``--step 0`` is the run's initial policy (``model.path``, without a LoRA adapter), so a
before/after pair of evaluations shares every setting but the weights. What is taken from the run:

- ``agent``: protocol, limits (turns, tokens per turn, context window, timeouts), temperature,
  top-p, top-k, prefill, thinking: the whole ``agent`` section (its training ``seed`` is not used:
  evaluation samples with ``--seed``, the evaluation seed, as ``eval.seed`` does during training);
- ``generator``: backend (hf or vllm), batch size, threads, vLLM settings; the model is the
  export, on ``model.device`` in ``model.dtype`` (unless ``generator.dtype`` is set); a LoRA run's
  export is its adapter, sampled on top of the run's ``model.path``;
- ``sandbox.concurrency`` (unless ``--concurrency`` is given).

A flag of ``swerl eval`` that sets one of these (``--temperature``, ``--model``, ...) would be
silently overridden, so passing one with ``--from-run`` is an error.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from swerl.agent.evaluate import EvalConfig
from swerl.errors import ConfigError
from swerl.inference.config import HFGenerator
from swerl.run_layout import CONFIG_FILE, EXPORT_DIR, STEP_DIR_RE, export_dir
from swerl.selection import MetricsFileError, select_checkpoint
from swerl.trainer.config import load_train_config

# `swerl eval` options (Python parameter names) whose value --from-run takes from the run.
RUN_FLAGS = {
    "model": "--model", "lora": "--lora", "backend": "--backend", "tokenizer": "--tokenizer", "served_model": "--served-model",
    "device": "--device", "batch_size": "--batch-size", "threads": "--threads", "protocol": "--protocol",
    "prefill": "--prefill", "temperature": "--temperature", "top_p": "--top-p",
    "max_new_tokens": "--max-new-tokens", "max_turns": "--max-turns", "context_window": "--context-window",
    "agent_timeout": "--agent-timeout", "enable_thinking": "--enable-thinking",
}


def exported_steps(run_dir: Path) -> list[int]:
    """Steps with an HF export under ``RUN_DIR/exports`` (``global_step_N`` folders), ascending."""
    found = []
    for path in (run_dir / EXPORT_DIR).glob("global_step_*"):
        match = STEP_DIR_RE.match(path.name)
        if match and path.is_dir():
            found.append(int(match.group(1)))
    return sorted(found)


def resolve_export(run_dir: Path, step: int | None) -> tuple[int, Path | None, str]:
    """The export to evaluate: ``step`` when given, else the selected checkpoint, else the latest.

    Returns: (step, export folder, why this step: "--step", "selected ..." or "latest export");
        the folder is None for ``step == 0``: the run's initial policy, its ``model.path``.
    Raises: ConfigError naming the steps that have an export when there is none for ``step``.
    """
    if step == 0:
        return 0, None, "--step 0: the initial policy"
    steps = exported_steps(run_dir)
    if not steps:
        raise ConfigError(f"{run_dir / EXPORT_DIR}: no global_step_N exports: pass the RUN_DIR of a swerl train "
                          "run that wrote exports (checkpointing.hf_save_interval or save_final)")
    if step is not None:
        if step not in steps:
            raise ConfigError(f"--step {step}: no export {export_dir(run_dir, step)}; "
                              f"exported steps: {', '.join(map(str, steps))}")
        return step, export_dir(run_dir, step), "--step"
    try:
        chosen = select_checkpoint(run_dir).chosen
    except MetricsFileError:  # no (readable) reward records: nothing to select by
        chosen = None
    if chosen is not None:
        return chosen.step, export_dir(run_dir, chosen.step), (
            f"selected (trailing EMA {chosen.ema:.4f} of reward/avg_raw_reward)")
    return steps[-1], export_dir(run_dir, steps[-1]), "latest export"


def eval_config_from_run(
    run_dir: Path, step: int | None, *, tasks: Path, out_dir: Path, samples: int, limit: int | None, seed: int = 0,
    concurrency: int | None, resume: bool, given: Collection[str] = (),
) -> tuple[EvalConfig, str]:
    """Build the ``swerl eval`` config of an export of ``run_dir``.

    Args:
        run_dir: a ``swerl train`` run directory (its ``config.yaml`` and ``exports/``).
        step: the export's global step; None = selected checkpoint, else the latest export.
        tasks, out_dir, samples, limit, seed, resume: as the ``swerl eval`` flags.
        concurrency: episodes alive at once; None = the run's ``sandbox.concurrency``.
        given: names of the ``swerl eval`` parameters given on the command line.
    Returns: (EvalConfig, a one-line description of the export and why it was chosen).
    Raises: ConfigError (exit 2) for a missing run dir, config or export, or a flag in ``given``
        that the run sets.
    """
    clashing = [RUN_FLAGS[name] for name in given if name in RUN_FLAGS]
    if clashing:
        raise ConfigError(f"--from-run takes the model, protocol, limits and sampling from {run_dir / 'config.yaml'}: "
                          f"drop {', '.join(sorted(clashing))} (or evaluate without --from-run)")
    if not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError(f"--from-run {run_dir}: no config.yaml: pass the RUN_DIR of a swerl train run")
    run = load_train_config(run_dir / CONFIG_FILE)
    step, export, why = resolve_export(run_dir, step)
    if export is None:  # step 0: the weights the run started from
        weights = {"model": run.model.path, "lora_adapter": None}
    elif run.model.lora is None:
        weights = {"model": str(export)}
    else:
        weights = {"model": run.model.path, "lora_adapter": str(export)}
    generator = run.generator
    if isinstance(generator, HFGenerator):  # under train it sampled with the module: its device and dtype
        weights.update(device=run.model.device if run.model.device != "auto" else "cpu", dtype=run.model.dtype)
    else:
        weights["dtype"] = generator.dtype or run.model.dtype
    inference = type(generator).model_validate({**generator.model_dump(exclude_unset=True), **weights})
    config = EvalConfig(
        tasks=tasks, samples=samples, seed=seed, limit=limit, out_dir=out_dir, resume=resume,
        concurrency=concurrency if concurrency is not None else run.sandbox.concurrency,
        agent=run.agent, inference=inference,
    )
    return config, f"step {step} of {run_dir} ({why}): {export or run.model.path or 'the default model'}"
