"""How much RAM a run's processes peak at, from the model and batch shapes, and how long a
step took the last time a run was made here: the dry-run's sizing lines and warnings.

Stage: ``trainer/`` (the preflight). No torch: shapes come from the HF config.

The trainer process holds, at the peak of the update:
- the runtime (Python, torch, transformers): :data:`RUNTIME_BYTES`;
- the training state: 16 B per parameter (fp32 weights, gradients, AdamW m and v);
- one micro-batch's saved activations. Per token and decoder layer, the tensors autograd keeps
  for a Llama-style layer without dropout: the two RMSNorm inputs and outputs, q and k after
  rotary, k and v repeated to the query heads, the attention output (8 d + kv_dim floats), the
  attention probabilities of the eager/math softmax (2 H S: scores and probabilities), and the
  SwiGLU MLP's gate, up, activation and product (4 I). It is the layer count of
  Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
  sec. 4.1: 34 h + 5 a s bytes in fp16 with dropout) for this layer, without dropout masks;
- the logits, their log-softmax and its gradient (3 x rows x S x vocab floats; with the LM head
  chunked, ``model.lm_head_chunk_tokens``, 3 x chunk x vocab floats and the head's float32 weight gradient);
- with the HF generator in the process, the KV cache of the episodes in flight (a pipelined run
  adds an HF copy of the weights, and on the exact schedule the staged snapshot of the trainable ones).
On a GPU (``model.device: cuda``, or ``auto`` where a GPU is visible) the state, activations and
logits live in GPU memory (the plan's per-rank rows); the host holds each rank's runtime and, on
rank 0, the fp32 weights it reads before broadcasting them (the other ranks build on ``meta``),
plus whatever ``model.cpu_offload`` (the training state, at most all of it on one node) and
``model.reference_cpu_offload`` (the reference's weights) put there.
S is the longest row the limits allow: the longest task instruction (:data:`CHARS_PER_TOKEN`
characters a token, plus :data:`TEMPLATE_TOKENS` of chat template and system prompt) plus every
turn's ``max_new_tokens_per_turn``; a multi-turn episode also holds observations, so it takes
the context window; never more than ``algorithm.max_seq_len``.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from swerl import metric_keys
from swerl.run_layout import CONFIG_FILE, METRICS_FILE
from swerl.trainer.config import TrainConfig
from swerl.trainer.setup.gpu_budget import planned_chunk_tokens
from swerl.trainer.setup.model_size import kv_bytes_per_token
from swerl.trainer.setup.plan import format_bytes
from swerl.trainer.setup.state_size import TRAIN_BYTES_PER_PARAM

RUNTIME_BYTES = 500_000_000
"""Resident size of Python + torch + transformers with a model loaded lazily (measured: 0.48 GB
max RSS after loading SmolLM2-135M on the 2-core EPYC)."""
CHARS_PER_TOKEN = 3.0
"""Characters per token of an instruction (HumanEval on SmolLM2: 3.0 to 4.0; the low end)."""
TEMPLATE_TOKENS = 64
"""Tokens of chat template and system prompt around an instruction."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak RAM per process kind. trainer_bytes: one trainer process (with its HF generator when
    the generator runs in it). generator_bytes: vLLM engines on this host (0 for HF). sandbox_bytes:
    the containers in flight (memory limits). row_tokens: S, the row length the update was sized at."""

    trainer_bytes: int
    generator_bytes: int
    sandbox_bytes: int
    row_tokens: int
    on_gpu: bool = False

    @property
    def total_bytes(self) -> int:
        return self.trainer_bytes + self.generator_bytes + self.sandbox_bytes


def longest_row_tokens(cfg: TrainConfig, instructions: list[str]) -> int:
    """S (module docstring)."""
    limits = cfg.agent.limits
    cap = min(limits.context_window_tokens, cfg.algorithm.max_seq_len or limits.context_window_tokens)
    if limits.max_turns > 1:
        return cap
    prompt = math.ceil(max((len(text) for text in instructions), default=0) / CHARS_PER_TOKEN) + TEMPLATE_TOKENS
    return min(cap, prompt + limits.max_new_tokens_per_turn)


def update_bytes(shape: dict, rows: int, seq: int, item: int, checkpointing: bool, chunk: int = 0) -> int:
    """Saved activations plus logits of one micro-batch of ``rows`` x ``seq`` tokens (bytes); with
    the LM head in ``chunk``-position chunks (``model.lm_head_chunk_tokens``) one chunk's logits
    plus the float32 (V, d) head-weight gradient instead of the whole logits."""
    d, layers, vocab = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]
    heads = shape["num_attention_heads"]
    kv_dim = shape.get("num_key_value_heads", heads) * (shape.get("head_dim") or d // heads)
    per_layer = 8 * d + kv_dim + 4 * shape["intermediate_size"] + 2 * heads * seq
    saved = layers * d + per_layer if checkpointing else layers * per_layer  # checkpointing: one layer at a time
    logits = 4 * 3 * chunk * vocab + 4 * vocab * d if chunk else 4 * 3 * rows * seq * vocab
    return item * rows * seq * saved + logits


def estimate_memory(cfg: TrainConfig, shape: dict, num_params: int, instructions: list[str],
                    sandbox_memory_mb: int) -> MemoryEstimate:
    """Peak RAM of the trainer process, the local vLLM engines and the sandboxes (module docstring)."""
    m, gen = cfg.model, cfg.generator
    item = 2 if m.dtype == "bfloat16" else 4
    seq = longest_row_tokens(cfg, instructions)
    in_flight = cfg.loop.rollout_concurrency or cfg.sandbox.concurrency
    if trains_on_gpu(m.device):
        host = RUNTIME_BYTES + num_params * 4  # rank 0 reads the fp32 weights, then broadcasts them
        host += num_params * TRAIN_BYTES_PER_PARAM if m.cpu_offload else 0
        host += num_params * item if m.reference_cpu_offload else 0
        return MemoryEstimate(host, 0, in_flight * sandbox_memory_mb * 2**20, seq, on_gpu=True)
    trainer = RUNTIME_BYTES + num_params * TRAIN_BYTES_PER_PARAM
    chunk = planned_chunk_tokens(m, shape, cfg.loop.micro_batch_size, seq)
    trainer += update_bytes(shape, cfg.loop.micro_batch_size, seq, item, m.gradient_checkpointing, chunk)
    generator = 0
    if gen.backend == "hf":
        trainer += in_flight * seq * kv_bytes_per_token(shape, item)
        if cfg.loop.max_staleness_steps > 0:
            trainer += num_params * item  # the producer's copy
            if cfg.loop.exact_staleness and m.lora is None:
                trainer += num_params * item  # the staged snapshot, held until the batch that needs it starts
    elif m.device == "cpu":
        generator = gen.num_engines * (int(gen.kv_cache_space_gib * 2**30) + num_params * 2 + RUNTIME_BYTES)
    return MemoryEstimate(trainer, generator, in_flight * sandbox_memory_mb * 2**20, seq)


def trains_on_gpu(device: str) -> bool:
    """Whether ``model.device`` trains on a GPU: ``cuda``, or ``auto`` where the NVIDIA driver's
    control device exists (no torch import: the dry-run stays fast)."""
    return device == "cuda" or (device == "auto" and Path("/dev/nvidiactl").exists())


def memory_lines(est: MemoryEstimate, cfg: TrainConfig) -> list[tuple[str, str]]:
    """The dry-run's rows: peak RAM per process kind and in all."""
    if est.on_gpu:
        extra = "".join([" + the training state (model.cpu_offload)" if cfg.model.cpu_offload else "",
                         " + the reference's weights (model.reference_cpu_offload)" if cfg.model.reference_cpu_offload else ""])
        return [("peak host RAM: trainer rank 0", f"{format_bytes(est.trainer_bytes)} (runtime + the fp32 weights it reads "
                 f"and broadcasts{extra}; state and activations on the GPUs; other ranks: the runtime)"),
                ("peak RAM: sandboxes (limits)", format_bytes(est.sandbox_bytes))]
    rows = [("peak RAM: trainer process", f"{format_bytes(est.trainer_bytes)} (runtime + state + one micro-batch of "
             f"{cfg.loop.micro_batch_size} x {est.row_tokens:,} tokens{' + HF KV cache' if cfg.generator.backend == 'hf' else ''})")]
    if est.generator_bytes:
        rows.append(("peak RAM: vLLM engines", format_bytes(est.generator_bytes)))
    rows.append(("peak RAM: sandboxes (limits)", format_bytes(est.sandbox_bytes)))
    return rows


def available_ram_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (bytes), None off Linux."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def ram_note(est: MemoryEstimate, available: int | None) -> list[str]:
    """A warning when the trainer and generator processes' peak exceeds the RAM available now
    (the sandboxes' limits are named too, but they seldom reach them, so they do not trigger it)."""
    needed = est.trainer_bytes + est.generator_bytes
    if available is None or needed <= available:
        return []
    if est.on_gpu:
        return [f"RAM: trainer rank 0 may peak at {format_bytes(needed)} of host RAM (the fp32 weights it reads, and "
                f"what is offloaded) and {format_bytes(available)} is available here now; start rank 0 on a host with "
                "more free RAM, or turn off model.cpu_offload / model.reference_cpu_offload"]
    return [f"RAM: the trainer{' and vLLM engines' if est.generator_bytes else ''} may peak at {format_bytes(needed)} "
            f"and {format_bytes(available)} is available now (sandboxes may take up to {format_bytes(est.sandbox_bytes)} "
            "more): lower loop.micro_batch_size, set model.gradient_checkpointing=true, or lower "
            "loop.rollout_concurrency"]


def _same_model(path: Path, model_path: str | None) -> bool:
    """Whether the run of ``path`` (its folder's config.yaml) trained ``model_path``."""
    try:
        config = yaml.safe_load((path.parent / CONFIG_FILE).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(config, dict) and (config.get("model") or {}).get("path") == model_path


def last_step_seconds(run_dir: Path, model_path: str | None = None) -> tuple[Path, float, float] | None:
    """(metrics file, median ``timing/step_s``, episodes per step) of the newest earlier run of the
    same ``model.path``: the run dir itself (a re-run) or a sibling run dir; None when there is none."""
    candidates = [run_dir / METRICS_FILE, *run_dir.parent.glob(f"*/{METRICS_FILE}")]
    found = sorted({p for p in candidates if p.is_file() and _same_model(p, model_path)},
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for path in found:
        steps, episodes = [], []
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("global_step", 0) > 0 and metric_keys.TIMING_STEP_S in record:
                steps.append(float(record[metric_keys.TIMING_STEP_S]))
                episodes.append(float(record.get(metric_keys.REWARD_NUM_TRAJECTORIES, 0.0)))
        if steps:
            return path, statistics.median(steps), statistics.median(episodes)
    return None


def time_line(cfg_samples: int, total_steps: int, run_dir: Path, model_path: str | None = None) -> tuple[str, str]:
    """The dry-run's wall-time row: the last run of the model here, scaled by episodes per step,
    or how to measure."""
    last = last_step_seconds(run_dir, model_path)
    if last is None:
        return ("wall time (estimate)", f"no earlier run of this model next to {run_dir}: train 2 steps "
                "(--set loop.max_steps=2) to measure one")
    path, step_s, episodes = last
    per_step = step_s * (cfg_samples / episodes if episodes else 1.0)
    return ("wall time (estimate)", f"~{per_step:.0f} s/step x {total_steps} = ~{per_step * total_steps / 60:.0f} min "
            f"(median {step_s:.0f} s/step at {episodes:g} episodes/step in {path}, scaled by episodes/step)")
