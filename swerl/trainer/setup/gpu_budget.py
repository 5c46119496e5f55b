"""The peak GPU memory of one trainer rank during the update, summed from its parts, and the
dry-run's refusal when that sum does not fit the GPU.

Stage: ``trainer/`` (the plan). No torch import: shapes come from the HF config.

Parts, in bytes, for one rank of W at the peak of a micro-batch's backward (``model.device: cuda``):
- the training state: 16 B per trained parameter (/ W under FSDP), a LoRA run's frozen base;
- ``model.grad_sync: last_micro_batch`` under FSDP with W > 1: the unsharded fp32 gradients of
  every trained parameter (4 B each) between micro-batches, whatever W (FSDP2 accumulates them
  unsharded in ``reduce_dtype`` until the reduce-scatter);
- under FSDP, the all-gathered compute-dtype weights: the root unit (embeddings, final norm, LM
  head), unsharded from its forward to its backward, and two decoder layers (the one running and
  the one prefetched);
- the logits of one micro-batch at the full context window and their gradient (rows x window x
  V in the compute dtype, twice), plus the float32 chunks of the log-probs
  (``rl.logprobs.CHUNK_BYTES``, about 4 alive); with the LM head chunked
  (``model.lm_head_chunk_tokens``, :func:`planned_chunk_tokens`) one chunk's logits and their
  gradient (chunk x V, twice) instead of the whole, plus the float32 (V, d) gradient of the head
  weight it sums the chunks in;
- with gradient checkpointing, every layer's input (rows x window x d) and one layer's recompute;
  without it, every layer's saved activations;
  a layer's activations per token: 8 d + kv_dim + 4 I values (``memory.update_bytes`` without the
  eager attention matrix: on CUDA, SDPA's flash / memory-efficient kernels never build it).
Left out: the CUDA context and NCCL buffers (about 1-2 GB), and fragmentation of PyTorch's cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from swerl.errors import ConfigError
from swerl.trainer.config import ModelConfig, TrainConfig
from swerl.trainer.setup.model_size import model_size
from swerl.trainer.setup.state_size import state_bytes, trained_params

GIB = 2**30


@dataclass(frozen=True)
class RankMemory:
    """Peak GPU bytes of one trainer rank in the update, by part (module docstring)."""

    ranks: int
    state: float
    unsharded_grads: float
    gathered_weights: float
    logits: float
    activations: float
    logits_chunk: int = 0

    @property
    def total(self) -> float:
        return self.state + self.unsharded_grads + self.gathered_weights + self.logits + self.activations

    def words(self) -> str:
        """``71.3 GB at 4 ranks: state 32.8 + ...``: the sum and its parts, decimal GB."""
        parts = [f"state {self.state / 1e9:.1f}"]
        if self.unsharded_grads:
            parts.append(f"unsharded fp32 gradients {self.unsharded_grads / 1e9:.1f} (model.grad_sync=last_micro_batch)")
        if self.gathered_weights:
            parts.append(f"gathered weights {self.gathered_weights / 1e9:.1f}")
        chunked = f" (LM head in chunks of {self.logits_chunk:,} positions)" if self.logits_chunk else ""
        parts += [f"logits + gradient {self.logits / 1e9:.1f}{chunked}", f"activations {self.activations / 1e9:.1f}"]
        return f"{self.total / 1e9:.1f} GB at {self.ranks} rank{'s' if self.ranks > 1 else ''}: {' + '.join(parts)}"


def rank_memory(cfg: TrainConfig, shape: dict, n: int, ranks: int) -> RankMemory:
    """The parts of one of ``ranks`` trainer ranks' peak (module docstring)."""
    from swerl.rl.logprobs import CHUNK_BYTES

    m, rows, window = cfg.model, cfg.loop.micro_batch_size, cfg.agent.limits.context_window_tokens
    item = 2 if m.dtype == "bfloat16" else 4
    d, layers, vocab = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]
    heads = shape["num_attention_heads"]
    kv_dim = shape.get("num_key_value_heads", heads) * (shape.get("head_dim") or d // heads)
    per_layer = 8 * d + kv_dim + 4 * shape["intermediate_size"]  # values per token
    sharded = m.fsdp and ranks > 1
    grads = 4.0 * trained_params(cfg, shape, n) if sharded and m.grad_sync == "last_micro_batch" else 0.0
    gathered = 0.0
    if m.fsdp:
        root = vocab * d * (1 if shape.get("tie_word_embeddings") else 2)
        gathered = item * (root + 2 * (n - root) / layers)
    chunk = planned_chunk_tokens(m, shape, rows, window)
    if chunk:
        logits = 2.0 * item * chunk * vocab + 4 * CHUNK_BYTES + 4.0 * vocab * d
    else:
        logits = 2.0 * item * rows * window * vocab + 4 * CHUNK_BYTES
    if m.gradient_checkpointing:
        activations = item * rows * window * (layers * d + per_layer)
    else:
        activations = item * rows * window * layers * per_layer
    return RankMemory(ranks, state_bytes(cfg, shape, n, ranks), grads, gathered, logits, activations, chunk)


def planned_chunk_tokens(m: ModelConfig, shape: dict, rows: int, positions: int) -> int:
    """Positions per LM-head chunk of a forward of ``rows`` x ``positions`` (0 = the whole logits),
    as the update will choose them (``rl.lm_head.resolve_chunk_tokens``; auto keeps a head whose
    config soft-caps or scales the logits whole)."""
    from swerl.rl.lm_head import resolve_chunk_tokens

    setting = None if m.lm_head_chunk_tokens == "auto" else m.lm_head_chunk_tokens
    if setting is None and any(shape.get(k) not in (None, 1.0) for k in ("final_logit_softcapping", "logit_scale")):
        return 0
    return resolve_chunk_tokens(setting, rows, positions, shape["vocab_size"])


def gpu_total_bytes(cfg: TrainConfig) -> float | None:
    """One trainer GPU's memory: ``model.gpu_memory_gib``, else the visible GPU's (torch), else None."""
    if cfg.model.gpu_memory_gib is not None:
        return cfg.model.gpu_memory_gib * GIB
    import torch

    return float(torch.cuda.get_device_properties(0).total_memory) if torch.cuda.is_available() else None


def memory_row(cfg: TrainConfig, ranks: tuple[int, ...], gpu_bytes: float | None) -> list[tuple[str, str]]:
    """The plan's ``GPU memory, update peak / rank`` row: the sum of the parts at each rank count,
    against the GPU when its size is known. Empty on CPU or for an unknown shape."""
    shape, n, _ = model_size(cfg.model.path)
    if cfg.model.device == "cpu" or shape is None or n is None:
        return []
    sums = "; ".join(rank_memory(cfg, shape, n, w).words() for w in ranks)
    against = f" (GPU: {gpu_bytes / 1e9:.1f} GB)" if gpu_bytes else " (GPU size unknown: set model.gpu_memory_gib)"
    return [("GPU memory, update peak / rank", sums + against)]


def check_fits(cfg: TrainConfig, ranks: tuple[int, ...], gpu_bytes: float | None) -> None:
    """Refuse a GPU run whose update peak exceeds the GPU at the largest rank count sized.

    Raises: ConfigError naming the sum, its parts, the GPU and the settings that lower it.
    """
    shape, n, _ = model_size(cfg.model.path)
    if cfg.model.device == "cpu" or shape is None or n is None or gpu_bytes is None:
        return
    best = rank_memory(cfg, shape, n, max(ranks))
    if best.total <= gpu_bytes:
        return
    fixes = ["model.grad_sync=every_micro_batch"] if best.unsharded_grads else []
    if not cfg.model.gradient_checkpointing:
        fixes.append("model.gradient_checkpointing=true")
    if cfg.loop.micro_batch_size > 1:
        fixes.append("a smaller loop.micro_batch_size")
    fixes += ["more ranks (model.fsdp=true)" if cfg.model.fsdp else "model.fsdp=true over more GPUs",
              "a smaller agent.limits.context_window_tokens"]
    raise ConfigError(f"model: the update needs {best.words()}, more than one GPU's "
                      f"{gpu_bytes / 1e9:.1f} GB: set {', or '.join(fixes)}")
