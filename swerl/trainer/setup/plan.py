"""The run plan: how many steps, prompts, samples, optimizer steps and tokens a config implies.

``swerl train --dry-run`` prints it; ``train`` sizes the LR schedule from it.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from swerl.inference.config import AutoGenerator, VLLMGenerator
from swerl.text import counted
from swerl.trainer.rollouts.concurrency import rank_sandbox, split_count
from swerl.trainer.config import TrainConfig
from swerl.trainer.persistence.background import resolve_async_save
from swerl.trainer.setup.model_size import kv_bytes_per_token, model_size
from swerl.trainer.setup.state_size import TRAIN_BYTES_PER_PARAM, state_bytes, trained_params


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


CHECKPOINT_BYTES_PER_PARAM = 12  # DCP: fp32 weights + AdamW exp_avg and exp_avg_sq
REFERENCE_BYTES_PER_PARAM = 4  # the KL term's frozen reference: fp32 weights, no gradient or optimizer state
def export_bytes_per_param(cfg: TrainConfig) -> int:
    """HF exports are written in the training compute dtype (``hf_export.export_hf``): 2 B bf16, 4 B fp32."""
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


def stored_bytes(cfg: TrainConfig, shape: dict, n: int) -> tuple[int, int]:
    """(bytes of one checkpoint, bytes of one export): DCP of fp32 trained weights + AdamW m and v;
    safetensors of every weight in the compute dtype (:func:`export_bytes_per_param`), or a LoRA
    run's fp32 adapter (+ its fp32 merged weights with ``checkpointing.export_merged``)."""
    trained = trained_params(cfg, shape, n)
    if cfg.model.lora is None:
        return trained * CHECKPOINT_BYTES_PER_PARAM, n * export_bytes_per_param(cfg)
    return trained * CHECKPOINT_BYTES_PER_PARAM, 4 * (trained + (n if cfg.checkpointing.export_merged else 0))


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
    master = "" if m.dtype == "float32" else (", fp32 master weights" if m.lora is None else
                                              ", bf16 frozen base, fp32 LoRA adapters")
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
    state = state_bytes(cfg, shape, n, 1)
    if ranks == (1,):
        sized = f" = {format_bytes(state)}"
    else:
        sized = ": " + ", ".join(f"{w} ranks {format_bytes(state_bytes(cfg, shape, n, w))}" for w in ranks)
    offload = " (+ host RAM with cpu_offload)" if m.cpu_offload else ""
    if m.fsdp and m.grad_sync == "last_micro_batch" and ranks != (1,):
        offload += (f" + {format_bytes(4 * n)} unsharded fp32 gradients between micro-batches on every rank "
                    "(model.grad_sync=last_micro_batch; every_micro_batch keeps them sharded)")
    shards = " written by every rank, on a file system every rank sees" if ranks != (1,) else ""
    checkpoint, export = stored_bytes(cfg, shape, n)
    if m.lora is None:
        kinds = " (fp32 weights, gradients, AdamW m and v)" if ranks == (1,) else ""
        return [*lines, ("trainer state / rank", f"{count} params{what} x {TRAIN_BYTES_PER_PARAM} B{sized}{kinds}"
                         f"{offload}"),
                *_reference_lines(cfg, n, ranks),
                ("update activations / rank", _activation_words(cfg, shape)),
                ("checkpoint / export", f"{format_bytes(checkpoint)} DCP (fp32 weights + AdamW state){shards} / "
                 f"{format_bytes(export)} {'fp32' if m.dtype == 'float32' else m.dtype} safetensors; {_save_words(cfg)}")]
    adapters = trained_params(cfg, shape, n)
    base = 2 if m.dtype == "bfloat16" else 4
    merged = f" + fp32 merged weights {format_bytes(n * 4)}" if cfg.checkpointing.export_merged else ""
    return [*lines, ("trainer state / rank", f"{count} frozen params{what} x {base} B ({m.dtype} base) + "
                     f"{adapters / 1e6:.1f} M LoRA params (r={m.lora.rank}) x {TRAIN_BYTES_PER_PARAM} B{sized}{offload}"),
            *_reference_lines(cfg, n, ranks),
            ("update activations / rank", _activation_words(cfg, shape)),
            ("checkpoint / export", f"{format_bytes(checkpoint)} DCP (adapters + AdamW state){shards} / "
             f"{format_bytes(adapters * 4)} fp32 peft adapter{merged}; {_save_words(cfg)}")]


def _save_words(cfg: TrainConfig) -> str:
    """When checkpoints (and full exports) are written: ``checkpointing.async_save`` for ``model.device``."""
    setting, device = cfg.checkpointing.async_save, cfg.model.device
    background = "written in the background while the next step trains (checkpointing.async_save)"
    if setting == "auto" and device == "auto":
        return f"{background} on a GPU, before the next step on CPU"
    return background if resolve_async_save(setting, device) else "written before the next step"


def _activation_words(cfg: TrainConfig, shape: dict) -> str:
    """The update's largest tensors for one micro-batch at the full context window: the logits and
    their gradient (one chunk's with the LM head chunked: ``gpu_budget.planned_chunk_tokens``), one
    chunk's float32 graph of the log-probs (4 chunks of ``rl.logprobs.CHUNK_BYTES``:
    bench/logprob_memory.py measures 1.00x the logits + 0.53 GB), and the checkpointed hidden state
    of every layer."""
    from swerl.rl.logprobs import CHUNK_BYTES
    from swerl.trainer.setup.gpu_budget import planned_chunk_tokens

    m, rows, window = cfg.model, cfg.loop.micro_batch_size, cfg.agent.limits.context_window_tokens
    item = 2 if m.dtype == "bfloat16" else 4
    chunk = planned_chunk_tokens(m, shape, rows, window)
    logits = (chunk or rows * window) * shape["vocab_size"] * item
    if chunk:
        words = (f"LM head in chunks of {chunk:,} positions (model.lm_head_chunk_tokens): one chunk's logits + their "
                 f"gradient {format_bytes(2 * logits)} ({chunk:,} x {shape['vocab_size']:,} {m.dtype}) instead of "
                 f"{format_bytes(2 * logits * rows * window / chunk)}, + the head's float32 weight gradient "
                 f"{format_bytes(4 * shape['vocab_size'] * shape['hidden_size'])}; log-probs in float32 chunks, "
                 f"+{format_bytes(4 * CHUNK_BYTES)}")
    else:
        words = (f"logits + their gradient {format_bytes(2 * logits)} ({rows} x {window:,} x {shape['vocab_size']:,} "
                 f"{m.dtype}; log-probs in float32 chunks, +{format_bytes(4 * CHUNK_BYTES)})")
    if not m.gradient_checkpointing:
        return words + ", and every layer's activations (model.gradient_checkpointing=false)"
    hidden = shape["num_hidden_layers"] * rows * window * shape["hidden_size"] * item
    return words + f", {format_bytes(hidden)} checkpointed hidden states ({shape['num_hidden_layers']} layers)"


def _reference_lines(cfg: TrainConfig, n: int, ranks: tuple[int, ...]) -> list[tuple[str, str]]:
    """The KL term's frozen reference policy (fp32 weights, no gradients or optimizer state)."""
    if not cfg.algorithm.use_kl_loss:
        return []
    if cfg.model.lora is not None:
        return [("reference policy / rank", f"the policy with its LoRA adapters off for the {cfg.algorithm.kl_estimator} "
                 "KL term: no second copy; one more forward per row and step")]
    size = n * REFERENCE_BYTES_PER_PARAM
    per_rank = format_bytes(size) if not cfg.model.fsdp or ranks == (1,) else ", ".join(
        f"{w} ranks {format_bytes(size / w)}" for w in ranks)
    where = "in host RAM (model.reference_cpu_offload)" if cfg.model.reference_cpu_offload else "on the trainer's device"
    return [("reference policy / rank", f"frozen copy of the initial policy for the {cfg.algorithm.kl_estimator} KL "
             f"term: {per_rank} fp32 weights {where}; one more forward per row and step")]


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


def _batched_tokens_words(gen: VLLMGenerator, device: str) -> str:
    """The engines' tokens per scheduler step for ``model.device`` (``auto``: both device defaults)."""
    if device == "auto" and gen.max_num_batched_tokens is None:
        return (f"{gen.resolved_max_num_batched_tokens(on_cpu=False):,} on a GPU, "
                f"{gen.resolved_max_num_batched_tokens(on_cpu=True):,} on CPU")
    return f"{gen.resolved_max_num_batched_tokens(on_cpu=device == 'cpu'):,}"


def _engine_count(gen: VLLMGenerator, ranks: int) -> int:
    """vLLM engines of the whole run: the shared ``server_urls``, else ``num_engines`` per rank."""
    return len(gen.server_urls) if gen.server_urls else gen.num_engines * ranks


def disk_sync_words(full_bytes: int, engines: int, ranks: int) -> str:
    """What ``weight_sync: disk`` costs per step: the version written once (one shard per rank),
    then read back whole by every engine."""
    shards = f", one shard per rank of {format_bytes(full_bytes // ranks)}" if ranks > 1 else ""
    on = f" on {ranks} ranks" if ranks > 1 else ""
    return (f"{format_bytes(full_bytes)} written to weight_sync_dir{shards}; {format_bytes(full_bytes)} read back by "
            f"each engine, {format_bytes(full_bytes * engines)} in all over {counted(engines, 'engine')}{on}")


def _sync_lines(cfg: TrainConfig, ranks: int) -> list[tuple[str, str]]:
    """What one weight sync ships to each engine (every weight in the engine dtype, or the adapter)
    and how: through disk (its bytes written and read per step), or NCCL from GPU memory."""
    shape, n, _ = model_size(cfg.model.path)
    gen = cfg.generator
    if shape is None or n is None or not isinstance(gen, VLLMGenerator):
        return []
    engine_bytes = 2 if gen.resolved_dtype() == "bfloat16" else 4
    full = n * engine_bytes
    if cfg.model.lora is not None:
        adapter = trained_params(cfg, shape, n) * engine_bytes
        return [("weight sync / step", f"{format_bytes(adapter)} LoRA adapter per engine "
                 f"({full / adapter:.0f}x less than the {format_bytes(full)} of every weight)")]
    disk = disk_sync_words(full, _engine_count(gen, ranks), ranks)
    if gen.weight_sync == "nccl":
        how = f"NCCL broadcast from each server's owner rank's GPU, nothing on disk (through disk: {disk})"
    elif gen.weight_sync == "auto":  # the preflight resolves it first: the plan of a run never says auto
        how = ("weight_sync auto, chosen when the run starts: NCCL broadcast where every server runs on the "
               f"trainer's node with CUDA and NCCL, else through disk: {disk}")
    else:
        how = f"through disk: {disk}"
    return [("weight sync / step", f"{format_bytes(full)} {gen.resolved_dtype()} weights per engine; {how}")]


def _generator_lines(cfg: TrainConfig, ranks: int, in_flight: int) -> list[tuple[str, str]]:
    """The generator's backend and placement, and the KV cache the episodes in flight need at full context."""
    m, gen = cfg.model, cfg.generator
    if isinstance(gen, AutoGenerator):  # the preflight resolves it first: the plan of a run never says auto
        return [("generator", "auto: HF generate or vLLM, chosen for this machine when the run starts")]
    if gen.backend == "vllm":
        dtype = gen.resolved_dtype()
        lines = [("generator", f"{_vllm_where(cfg, ranks)} ({dtype}, max_model_len {gen.max_model_len:,}, "
                  f"max_num_seqs {gen.max_num_seqs}, max_num_batched_tokens {_batched_tokens_words(gen, m.device)}); "
                  f"{'LoRA adapter' if m.lora else 'weights'} synced every step"),
                 *_sync_lines(cfg, ranks)]
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


def _gpu_phase_lines(cfg: TrainConfig, ranks: tuple[int, ...]) -> list[tuple[str, str]]:
    """GPU memory of each phase (rollouts, update) on the smallest rank count sized (``colocation.py``)."""

    from swerl.trainer.setup.gpu_budget import gpu_total_bytes, memory_row

    shape, n, _ = model_size(cfg.model.path)
    state = state_bytes(cfg, shape, n, ranks[0]) if n and shape else None
    total = gpu_total_bytes(cfg) if cfg.model.device != "cpu" else None
    return [*gpu_phase_lines(cfg, n, state, total), *memory_row(cfg, ranks, total)]


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
        *_gpu_phase_lines(cfg, ranks),
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
    one = not isinstance(cfg.generator, VLLMGenerator) or cfg.generator.num_engines == 1
    engines = ("its own HF copy of the policy (one more model in memory), weights copied in between two "
               "generate calls after every step") if cfg.generator.backend == "hf" else (
               f"the run's vLLM {'engine' if one else 'engines'} (per rank); weights reach {'it' if one else 'them'} "
               "between two requests, episodes in flight continue")
    if cfg.loop.exact_staleness:
        engines = ("its own HF copy of the policy (one more model in memory)" if cfg.generator.backend == "hf" else
                   f"the run's vLLM {'engine' if one else 'engines'} (per rank)") + \
                  "; weights reach it between two batches only (exact schedule)"
        schedule = (f"producer thread {counted(k, 'step')} ahead: batch s is sampled by the weights after "
                    f"max(s - 1 - {k}, start) steps (exact schedule: staleness exactly {k}, repeatable)")
    else:
        schedule = (f"producer thread up to {counted(k, 'step')} ahead: batch s starts once the generator holds "
                    f"weights of step >= s - 1 - {k}; nothing finished is discarded")
    return [
        ("rollout pipeline", schedule),
        ("pipeline engines", f"the producer samples with {engines}"),
        ("expected overlap", "step time ~ max(rollouts, update + weight sync) instead of their sum, from step 2 "
         "(step 1 waits for its rollouts)"),
    ]


def dynamic_sampling_lines(cfg: TrainConfig) -> list[tuple[str, str]]:
    """Dry-run line of ``algorithm.dynamic_sampling`` when on: what a step may draw beyond its batch."""
    ds, b, n = cfg.algorithm.dynamic_sampling, cfg.loop.train_batch_size, cfg.n_samples
    if not ds.enabled:
        return []
    most = b * (1 + ds.max_extra_rounds)
    return [("dynamic sampling", f"groups without signal dropped; up to {counted(ds.max_extra_rounds, 'extra round')} "
             f"per step, each drawing the next prompts for the groups still missing: at most {most} prompts "
             f"({most * n} episodes) per step, so an epoch may end in fewer than steps_per_epoch steps")]


def packing_words(cfg: TrainConfig) -> str:
    """How the update lays out a micro-batch's rows (``model.pack_rows``; auto is resolved when the
    model loads, from its attention implementation: ``trainer.step.packing.pack_choice``)."""
    setting, micro = cfg.model.pack_rows, cfg.loop.micro_batch_size
    if setting is False:
        return "padded to each micro-batch's longest row (model.pack_rows: false)"
    if setting == "auto" and micro == 1:
        return "one row per forward, no padding (loop.micro_batch_size 1; model.pack_rows: auto packs nothing)"
    how = ("packed without padding between rows: one sequence per micro-batch with flash/flex attention; with sdpa/eager "
           "one sequence or sequences of the longest row, the smaller attention square")
    if setting is True:
        return f"{how} (model.pack_rows: true; a model whose attention cannot is refused when it loads)"
    return f"{how} (model.pack_rows: auto, chosen when the model loads: padded where its attention cannot; the log says)"


def reproducibility_words(cfg: TrainConfig) -> str:
    """What a second run of ``cfg`` with the same seed repeats, and a resume (measured per path with
    ``bench/reproducibility.py``; the table is in docs/inference.md)."""
    k = cfg.loop.max_staleness_steps
    if k > 0 and not cfg.loop.exact_staleness:
        return ("not repeatable: rollouts run ahead of the update on the timing-driven schedule "
                "(loop.exact_staleness: false), so the weights that sample an episode depend on timing; "
                "loop.exact_staleness: true for a repeatable run")
    words = _path_words(cfg)
    if k > 0:
        tested = ("tested bit for bit at k = 1" if cfg.generator.backend == "hf" else
                  "tested bit for bit at k = 1 with HF generate; on this generator the tests check which weights "
                  "sample each batch, not the samples")
        words += (f"; rollouts {counted(k, 'step')} ahead on the exact schedule: each batch is sampled by the weights "
                  f"{counted(k, 'step')} older than the trainer's (the first {counted(k + 1, 'batch', 'batches')} by the initial "
                  f"ones), whatever the timing, and a resume takes back the {counted(k, 'batch', 'batches')} its checkpoint "
                  f"saved ({tested})")
    return words


def _path_words(cfg: TrainConfig) -> str:
    """:func:`reproducibility_words` of the generator path alone (the synchronous loop's)."""
    if cfg.generator.backend == "vllm" and cfg.generator.vllm_mode == "servers":
        return ("not repeatable: a vLLM server batches requests as they arrive, so which share a forward follows "
                "timing (measured: most samples differ between two seeded runs); vllm_mode: inprocess with a seed "
                "repeats bit for bit")
    if cfg.generator.backend == "vllm" and cfg.agent.seed is None and cfg.model.device != "cpu":
        return ("not repeatable: vLLM training rollouts on GPUs are unseeded (a seeded request is sampled on "
                "its own); agent.seed: S seeds every request")
    if cfg.generator.backend == "hf" and getattr(cfg.generator, "max_batch_size", 1) > 1:
        return ("same samples for the same seed (a seed per row); the update may differ in the last bits "
                "(~1e-7 relative: the sampler's log-probs depend on which prompts share a generate batch); "
                "generator.max_batch_size: 1 (generator.hf.max_batch_size under auto) repeats it bit for bit")
    return "bit for bit: the same seed gives the same samples and updates, and a resumed step repeats"


def _every(interval: int, total: int, final: bool) -> list[int]:
    steps = list(range(interval, total + 1, interval)) if interval > 0 else []
    if final and total > 0 and (not steps or steps[-1] != total):
        steps.append(total)
    return steps


def make_plan(cfg: TrainConfig, num_tasks: int | None, world_size: int = 1) -> RunPlan:
    """The plan of ``cfg`` over ``num_tasks`` tasks (limited by ``data.limit``), launched on
    ``world_size`` processes (torchrun's ``WORLD_SIZE``; the placement lines depend on it).

    With an unknown task count the run is assumed to stop at ``loop.max_steps``.
    Raises: ConfigError when the run's concurrency leaves a rank nothing (``concurrency.rank_sandbox``),
        or when the update's GPU peak does not fit the GPU (``gpu_budget.check_fits``).
    """
    from swerl.trainer.setup.gpu_budget import check_fits, gpu_total_bytes

    loop = cfg.loop
    rank_sandbox(cfg.sandbox, loop.rollout_concurrency or cfg.sandbox.concurrency, 0, world_size)
    if cfg.model.device != "cpu":
        check_fits(cfg, rank_counts(cfg, world_size), gpu_total_bytes(cfg))
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
        placement=placement(cfg, loop.rollout_concurrency or cfg.sandbox.concurrency, world_size) + pipeline_lines(cfg)
        + dynamic_sampling_lines(cfg) + [("update rows", packing_words(cfg)),
                                         ("reproducibility", reproducibility_words(cfg))],
        notes=notes,
    )


BF16_BYTES = 2


def _bytes(num: float) -> str:
    return f"{num / 1e9:.1f} GB"


def gpu_phase_lines(cfg: TrainConfig, n_params: int | None, state_per_rank: float | None,
                    gpu_total_bytes: int | None) -> list[tuple[str, str]]:
    """Dry-run lines: the GPU memory of one trainer GPU during rollouts and during the update, and
    of a generation GPU when engines have their own. Empty on CPU.

    Args:
        n_params: the policy's parameters (None when unknown).
        state_per_rank: trainer state bytes per rank (fp32 weights, gradients, AdamW; None when unknown).
        gpu_total_bytes: one GPU's memory when a GPU is at hand, else None (shown as fractions).
    """
    gen = cfg.generator
    if cfg.model.device == "cpu":
        return []
    state = _bytes(state_per_rank) if state_per_rank is not None else "16 B/parameter / W"
    weights = f"{_bytes(n_params * BF16_BYTES)} bf16 weights" if n_params else "bf16 weights"
    trainer = f"trainer state {state} + activations"
    if not isinstance(gen, VLLMGenerator):
        return [("GPU memory, rollouts", f"trainer state {state} + the KV cache of HF generate (live module)"),
                ("GPU memory, update", trainer)]
    share = f"{gen.gpu_memory_utilization:g} of the GPU" + (
        f" = {_bytes(gen.gpu_memory_utilization * gpu_total_bytes)}" if gpu_total_bytes else "")
    engine = f"vLLM {share} ({weights} + KV cache)"
    if gen.vllm_mode == "inprocess":
        level1 = "vLLM asleep at level 1: weights in host RAM (a LoRA sync never rewrites the base), KV cache freed"
        asleep = ((level1 if cfg.model.lora else "vLLM asleep: weights and KV cache freed, re-written by the weight "
                   "sync") if gen.enable_sleep_mode else f"vLLM still holds {share} (generator.enable_sleep_mode=false)")
        return [("GPU memory, rollouts (colocated)", f"{engine} + trainer state {state}"),
                ("GPU memory, update (colocated)", f"{trainer} + {asleep}")]
    gpus = (f"{gen.num_servers} GPU(s) of their own per rank" if not gen.server_urls
            else f"{len(gen.server_urls)} running server(s)")
    return [("GPU memory, trainer GPU", f"{trainer}, in both phases (generation elsewhere)"),
            ("GPU memory, generation GPUs", f"{gpus}: {engine}, generating during the update too")]
