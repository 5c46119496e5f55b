"""The run plan: how many steps, prompts, samples, optimizer steps and tokens a config implies.

``swerl train --dry-run`` prints it; ``train`` sizes the LR schedule from it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from pydantic import BaseModel

from swerl.text import counted
from swerl.trainer.concurrency import rank_sandbox, split_count
from swerl.trainer.config import TrainConfig


class RunPlan(BaseModel):
    """Counts implied by a config and a task-set size.

    Attributes:
        num_tasks: tasks in the source (None when the source is not readable at plan time).
        steps_per_epoch: full batches per epoch (None when ``num_tasks`` is unknown).
        total_steps: training steps the run will take.
        prompts_per_step, samples_per_step: B and B * n.
        optimizer_steps_per_step: mini-batches x update epochs.
        total_optimizer_steps: what the LR schedule spans.
        max_tokens_per_episode: the agent's context window (prompt + every turn), tokens.
        token_budget_per_step: upper bound of tokens sampled per step (samples x window).
        checkpoint_steps, export_steps: steps that write a checkpoint / an HF export.
        placement: (item, value) lines: what each node runs and the numbers that size it
            (trainer ranks and memory per rank, generator KV cache, sandboxes' cores); see
            ``docs/scaling.md``.
        notes: warnings about the plan (e.g. features that run differently than configured).
    """

    num_tasks: int | None
    steps_per_epoch: int | None
    total_steps: int
    prompts_per_step: int
    samples_per_step: int
    optimizer_steps_per_step: int
    total_optimizer_steps: int
    max_tokens_per_episode: int
    token_budget_per_step: int
    checkpoint_steps: list[int]
    export_steps: list[int]
    placement: list[tuple[str, str]] = []
    notes: list[str] = []


TRAIN_BYTES_PER_PARAM = 16  # fp32 master weight + fp32 grad + AdamW m and v
CHECKPOINT_BYTES_PER_PARAM = 12  # DCP: fp32 weights + AdamW exp_avg and exp_avg_sq
def export_bytes_per_param(cfg: TrainConfig) -> int:
    """HF exports are written in the training compute dtype (``checkpoint.export_hf``): 2 B bf16, 4 B fp32."""
    return 2 if cfg.model.dtype == "bfloat16" else 4
RANK_COUNTS = (8, 16, 32, 64)  # sized for a GPU config with FSDP that is not launched yet


def format_bytes(num_bytes: float) -> str:
    """Decimal units that keep small figures readable: ``540 MB`` below 1 GB, ``2.2 GB`` above
    (``12 kB`` below 1 MB)."""
    if num_bytes >= 1e9:
        return f"{num_bytes / 1e9:.1f} GB"
    if num_bytes >= 1e6:
        return f"{num_bytes / 1e6:.0f} MB"
    return f"{num_bytes / 1e3:.0f} kB"


def model_shape(path: str | None) -> dict | None:
    """The HF ``config.json`` of ``model.path`` when it is a readable folder (no model load), else None."""
    if path is None or not (Path(path) / "config.json").is_file():
        return None
    try:
        return json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None


def model_folder_now(path: str | None) -> tuple[Path | None, str]:
    """The HF folder ``model.path`` stands for right now, converting nothing, and what it is.

    Returns: (folder or None, label): an HF folder as given; the cached conversion of a ``.gguf``
    or of the default model (``model.path: null``) once converted, else None with a label saying
    that the first run converts it. No weights are read.
    """
    from swerl.errors import SwerlError
    from swerl.inference.model_files import converted_dir, default_gguf_path

    if path is not None and not path.endswith(".gguf"):
        return Path(path), "model.path"
    name = "default model" if path is None else f"{Path(path).name}"
    try:
        gguf = default_gguf_path() if path is None else Path(path).expanduser()
        folder = converted_dir(gguf) if gguf.is_file() else None
    except (SwerlError, OSError):
        return None, f"{name} not installed"
    if folder is None or not (folder / "config.json").is_file():
        return None, f"{name}, converted at the first run"
    return folder, name


def exact_param_count(folder: Path) -> int | None:
    """Parameters stored in the ``*.safetensors`` files of ``folder``, from their JSON headers
    (8-byte little-endian length, then ``{name: {dtype, shape, data_offsets}}``); no tensor is
    read. None when the folder has no safetensors file or a header is unreadable."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    try:
        for file in files:
            with open(file, "rb") as handle:
                header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
            total += sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return total


def model_size(path: str | None) -> tuple[dict | None, int | None, str]:
    """(HF config, parameter count, label) of ``model.path`` now: the count from the safetensors
    headers, else from the config (:func:`param_count`); (None, None, why) when no folder is there yet."""
    folder, label = model_folder_now(path)
    shape = model_shape(str(folder)) if folder is not None else None
    if shape is None:
        return None, None, label if folder is None else f"{folder} not readable now"
    return shape, exact_param_count(folder) or param_count(shape), label


def param_count(shape: dict) -> int:
    """Parameters of a Llama/Qwen-style decoder from its config (embeddings, attention, MLP, norms)."""
    d, layers, vocab = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]
    heads = shape["num_attention_heads"]
    head_dim = shape.get("head_dim") or d // heads
    kv = shape.get("num_key_value_heads", heads)
    attn = d * heads * head_dim * 2 + d * kv * head_dim * 2
    mlp = 3 * d * shape["intermediate_size"]
    embed = vocab * d * (1 if shape.get("tie_word_embeddings") else 2)
    return layers * (attn + mlp + 2 * d) + embed + d


def kv_bytes_per_token(shape: dict, dtype_bytes: int = 2) -> int:
    """K and V of one token over all layers, bf16."""
    heads = shape["num_attention_heads"]
    head_dim = shape.get("head_dim") or shape["hidden_size"] // heads
    return 2 * shape["num_hidden_layers"] * shape.get("num_key_value_heads", heads) * head_dim * dtype_bytes


def _device_words(device: str, ranks: int) -> str:
    """Where ``model.device`` puts a process: ``CPU``, ``the GPU`` / ``each rank's GPU``, or auto's rule."""
    gpu = "the GPU" if ranks == 1 else "each rank's GPU"
    return {"cpu": "CPU", "cuda": gpu}.get(device, f"{gpu} when present, else CPU")


def rank_counts(cfg: TrainConfig, world_size: int) -> tuple[int, ...]:
    """The trainer ranks to size: this launch's ``world_size`` when > 1 (torchrun); for a GPU
    config with FSDP (made for several GPUs) started without torchrun, :data:`RANK_COUNTS`;
    else one process."""
    if world_size > 1:
        return (world_size,)
    return RANK_COUNTS if cfg.model.device != "cpu" and cfg.model.fsdp else (1,)


def _trainer_lines(cfg: TrainConfig, ranks: tuple[int, ...]) -> list[tuple[str, str]]:
    """How the trainer runs (processes, device, sharding) and the memory and disk its state takes."""
    m = cfg.model
    shape, n, label = model_size(m.path)
    mode = "FSDP2 fully_shard over all ranks" if m.fsdp else "replicated, gradients all-reduced"
    master = "" if m.dtype == "float32" else ", fp32 master weights"
    if ranks == RANK_COUNTS:
        layout = (f"torchrun --nnodes N --nproc_per_node GPUs/node: one rank per GPU, {mode}, {m.dtype} compute"
                  f"{master}")
    elif ranks[0] > 1:
        layout = f"{ranks[0]} ranks (torchrun) on {_device_words(m.device, ranks[0])}, {mode}, {m.dtype} compute{master}"
    else:
        layout = f"1 process on {_device_words(m.device, 1)}, {m.dtype} compute{master}"
    lines = [("trainer", layout)]
    if shape is None or n is None:
        return [*lines, ("trainer state / rank", f"{TRAIN_BYTES_PER_PARAM} B per parameter / W ranks ({label}: "
                         "no parameter count yet)")]
    what = "" if label == "model.path" else f" ({label})"
    count = f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"
    state = n * TRAIN_BYTES_PER_PARAM
    if ranks == (1,):
        sized = f" = {format_bytes(state)} (fp32 weights, gradients, AdamW m and v)"
    else:
        sized = ": " + ", ".join(f"{w} ranks {format_bytes(state / (w if m.fsdp else 1))}" for w in ranks)
    offload = " (+ host RAM with cpu_offload)" if m.cpu_offload else ""
    if m.fsdp and m.grad_sync == "last_micro_batch" and ranks != (1,):
        offload += (f" + {format_bytes(4 * n)} unsharded fp32 gradients between micro-batches on every rank "
                    "(model.grad_sync=last_micro_batch; every_micro_batch keeps them sharded)")
    shards = " written by every rank, on a file system every rank sees" if ranks != (1,) else ""
    return [*lines, ("trainer state / rank", f"{count} params{what} x {TRAIN_BYTES_PER_PARAM} B{sized}{offload}"),
            ("update activations / rank", _activation_words(cfg, shape)),
            ("checkpoint / export", f"{format_bytes(n * CHECKPOINT_BYTES_PER_PARAM)} DCP (fp32 weights + AdamW "
             f"state){shards} / {format_bytes(n * export_bytes_per_param(cfg))} {'fp32' if m.dtype == 'float32' else m.dtype} "
             "safetensors")]


def _activation_words(cfg: TrainConfig, shape: dict) -> str:
    """The update's largest tensors for one micro-batch at the full context window: the logits and
    their gradient, one chunk's float32 graph of the log-probs (4 chunks of ``rl.logprobs.CHUNK_BYTES``:
    bench/logprob_memory.py measures 1.00x the logits + 0.53 GB), and the checkpointed hidden state
    of every layer."""
    from swerl.rl.logprobs import CHUNK_BYTES

    m, rows, window = cfg.model, cfg.loop.micro_batch_size, cfg.agent.limits.context_window_tokens
    item = 2 if m.dtype == "bfloat16" else 4
    logits = rows * window * shape["vocab_size"] * item
    words = (f"logits + their gradient {format_bytes(2 * logits)} ({rows} x {window:,} x {shape['vocab_size']:,} "
             f"{m.dtype}; log-probs in float32 chunks, +{format_bytes(4 * CHUNK_BYTES)})")
    if not m.gradient_checkpointing:
        return words + ", and every layer's activations (model.gradient_checkpointing=false)"
    hidden = shape["num_hidden_layers"] * rows * window * shape["hidden_size"] * item
    return words + f", {format_bytes(hidden)} checkpointed hidden states ({shape['num_hidden_layers']} layers)"


def _vllm_where(cfg: TrainConfig, ranks: int) -> str:
    """Where the vLLM engines run: in-process or servers, on CPU cores or GPUs."""
    gen, device = cfg.generator, cfg.model.device
    each = "per rank" if ranks > 1 else "for this process"
    hardware = {"cpu": f"CPU cores {', '.join(gen.cpu_cores) if gen.cpu_cores else '0..k-1 (one per engine)'}",
                "cuda": "the rank's GPU"}.get(device, "the rank's GPU when present, else CPU cores")
    if gen.vllm_mode == "inprocess":
        shared = "the trainer's cores" if device == "cpu" and not gen.cpu_cores else hardware
        return f"vLLM in-process {'on every rank' if ranks > 1 else 'in this process'}, on {shared}"
    if gen.server_urls:
        return f"{counted(len(gen.server_urls), 'running vLLM server')} {each} at {', '.join(gen.server_urls)}"
    return f"{counted(gen.num_servers, 'vLLM server')} {each} started by swerl, on {hardware}"


def _generator_lines(cfg: TrainConfig, ranks: int, in_flight: int) -> list[tuple[str, str]]:
    """The generator's backend and placement, and the KV cache the episodes in flight need at full context."""
    m, gen = cfg.model, cfg.generator
    if gen.backend == "vllm":
        dtype = gen.resolved_dtype()
        lines = [("generator", f"{_vllm_where(cfg, ranks)} ({dtype}, max_model_len {gen.max_model_len:,}, "
                  f"max_num_seqs {gen.max_num_seqs}); weights synced every step")]
        holds = (f"in the {gen.kv_cache_space_gib} GiB per engine vLLM reserves (generator.kv_cache_space_gib)"
                 if m.device == "cpu" else "over the generator GPUs")
    else:
        dtype = m.dtype
        where = "on every rank, each with its live policy" if ranks > 1 else "in this process, with the live policy"
        threads = f", {counted(gen.num_threads, 'torch thread')}" if gen.num_threads and m.device == "cpu" else ""
        lines = [("generator", f"HF generate {where} ({_device_words(m.device, ranks)}{threads}), batches of up "
                  f"to {gen.max_batch_size} prompts; no weight copy")]
        holds = "in host RAM" if m.device == "cpu" else f"on {_device_words(m.device, ranks)}"
    shape = model_size(m.path)[0]
    if shape is not None:
        per_token = kv_bytes_per_token(shape, 4 if dtype == "float32" else 2)
        window = cfg.agent.limits.context_window_tokens
        lines.append(("KV cache, all episodes at full context", f"{format_bytes(in_flight * window * per_token)} "
                      f"{dtype} ({in_flight} x {window:,} tokens x {per_token / 1024:g} KiB) {holds}"))
    return lines


def _in_flight_words(in_flight: int, ranks: tuple[int, ...]) -> str:
    """The run's episodes in flight and each rank's share of them (``concurrency.split_count``)."""
    source = "loop.rollout_concurrency or sandbox.concurrency"
    if ranks == (1,):
        return f"{in_flight} ({source})"
    shares = []
    for w in ranks:
        low, high = split_count(in_flight, w - 1, w), split_count(in_flight, 0, w)
        each = "none: raise it" if low == 0 else (f"{low}" if low == high else f"{low}-{high}")
        shares.append(f"{each} per rank on {w}")
    return f"{in_flight} for the whole run ({source}), each rank running its share: {', '.join(shares)}"


def placement(cfg: TrainConfig, in_flight: int, world_size: int = 1) -> list[tuple[str, str]]:
    """What each node runs for ``cfg`` launched on ``world_size`` processes, and the numbers that
    size it (docs/scaling.md)."""
    ranks = rank_counts(cfg, world_size)
    return [
        *_trainer_lines(cfg, ranks),
        *_generator_lines(cfg, max(ranks), in_flight),
        ("episodes in flight", _in_flight_words(in_flight, ranks)),
        ("sandbox cores / memory", f"{in_flight} containers x task.toml cpus/memory_mb (default 1 core, 2048 MiB) "
         f"= {in_flight} cores, {math.ceil(in_flight * 2048 / 1024)} GiB on the Docker hosts"),
    ]


def pipeline_lines(cfg: TrainConfig) -> list[tuple[str, str]]:
    """The rollout pipeline of ``cfg``: staleness bound, the engines the producer samples with, the
    overlap to expect (``docs/async.md``)."""
    k = cfg.loop.max_staleness_steps
    if k == 0:
        sync = "" if cfg.generator.backend == "hf" else " + weight sync"  # HF samples with the live module
        return [("rollout pipeline", f"synchronous (loop.max_staleness_steps=0): step time = rollouts + update{sync}, "
                 "in sequence")]
    one = cfg.generator.num_engines == 1
    engines = ("its own HF copy of the policy (one more model in memory), weights copied in between two "
               "generate calls after every step") if cfg.generator.backend == "hf" else (
               f"the run's vLLM {'engine' if one else 'engines'} (per rank); weights reach {'it' if one else 'them'} "
               "between two requests, episodes in flight continue")
    return [
        ("rollout pipeline", f"producer thread up to {counted(k, 'step')} ahead: batch s starts once the generator holds "
         f"weights of step >= s - 1 - {k}; nothing finished is discarded"),
        ("pipeline engines", f"the producer samples with {engines}"),
        ("expected overlap", "step time ~ max(rollouts, update + weight sync) instead of their sum, from step 2 "
         "(step 1 waits for its rollouts)"),
    ]


def _every(interval: int, total: int, final: bool) -> list[int]:
    steps = list(range(interval, total + 1, interval)) if interval > 0 else []
    if final and total > 0 and (not steps or steps[-1] != total):
        steps.append(total)
    return steps


def make_plan(cfg: TrainConfig, num_tasks: int | None, world_size: int = 1) -> RunPlan:
    """The plan of ``cfg`` over ``num_tasks`` tasks (limited by ``data.limit``), launched on
    ``world_size`` processes (torchrun's ``WORLD_SIZE``; the placement lines depend on it).

    With an unknown task count the run is assumed to stop at ``loop.max_steps``.
    Raises: ConfigError when the run's concurrency leaves a rank nothing (``concurrency.rank_sandbox``).
    """
    loop = cfg.loop
    rank_sandbox(cfg.sandbox, loop.rollout_concurrency or cfg.sandbox.concurrency, 0, world_size)
    if num_tasks is not None and cfg.data.limit is not None:
        num_tasks = min(num_tasks, cfg.data.limit)
    steps_per_epoch = None if num_tasks is None else num_tasks // loop.train_batch_size
    by_epochs = None if steps_per_epoch is None else steps_per_epoch * loop.epochs
    candidates = [s for s in (by_epochs, loop.max_steps) if s is not None]
    total = min(candidates) if candidates else 0
    minis = loop.train_batch_size // (loop.mini_batch_size or loop.train_batch_size)
    opt_per_step = minis * loop.update_epochs
    window = cfg.agent.limits.context_window_tokens
    samples = loop.train_batch_size * cfg.n_samples
    notes = []
    if num_tasks is None:
        notes.append(f"task source {cfg.data.tasks} not readable now: steps assume loop.max_steps")
    ck = cfg.checkpointing
    return RunPlan(
        num_tasks=num_tasks,
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
        prompts_per_step=loop.train_batch_size,
        samples_per_step=samples,
        optimizer_steps_per_step=opt_per_step,
        total_optimizer_steps=total * opt_per_step,
        max_tokens_per_episode=window,
        token_budget_per_step=samples * window,
        checkpoint_steps=_every(ck.ckpt_interval, total, ck.save_final),
        export_steps=_every(ck.hf_save_interval, total, ck.save_final),
        placement=placement(cfg, loop.rollout_concurrency or cfg.sandbox.concurrency, world_size) + pipeline_lines(cfg),
        notes=notes,
    )
