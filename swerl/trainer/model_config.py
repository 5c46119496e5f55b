"""The ``model:`` section of ``swerl train``'s config: the policy being trained and its LoRA
adapters (``swerl.trainer.config.TrainConfig.model``; importable from ``swerl.trainer.config``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class StrictModel(BaseModel):
    """A config section that refuses unknown keys (``extra="forbid"``)."""

    model_config = ConfigDict(extra="forbid")


class LoraConfig(StrictModel):
    """LoRA adapters (peft): the base weights stay frozen, only the adapters train and hold AdamW state."""

    rank: int = Field(16, ge=1, le=512, description="Adapter rank r (vLLM serves ranks up to 512).")
    alpha: float = Field(32.0, gt=0, description="Scale numerator: the adapter's output is multiplied by alpha / rank.")
    dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on the adapter's input while training; > 0 makes the trainer's "
        "log-probs differ from the sampler's by noise that TIS then sees (0 keeps them equal)."
    )
    target_modules: Literal["all-linear"] | list[str] = Field(
        "all-linear", description="Linear layers that get adapters: 'all-linear' (every linear of the decoder "
        "but the LM head) or names such as [q_proj, k_proj, v_proj, o_proj]."
    )


class ModelConfig(StrictModel):
    """The policy being trained."""

    path: str | None = Field(
        None, description="HF folder or GGUF file of the initial policy; None = the default SmolLM2-135M-Instruct."
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Training device; auto = CUDA when present.")
    dtype: Literal["float32", "bfloat16", "auto"] = Field(
        "float32",
        description="Compute dtype of trainer forwards/backwards (bf16: autocast when replicated, FSDP2 "
        "MixedPrecisionPolicy when sharded); master weights, gradients, AdamW state, log-softmax and loss stay fp32. "
        "auto: bfloat16 where this machine's bf16 matmul measures >= 1.5x its fp32 one, else float32 (trainer/setup/auto.py).",
    )
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward (less memory, ~30% slower).")
    fsdp: bool = Field(
        False, description="Shard parameters, gradients and AdamW state with FSDP2 fully_shard over all ranks "
        "(CUDA/NCCL or CPU/gloo); else replicate + all-reduce."
    )
    cpu_offload: bool = Field(
        False, description="With fsdp: keep sharded parameters, gradients and optimizer state in host memory (CPUOffloadPolicy)."
    )
    reference_cpu_offload: bool = Field(
        False, description="With algorithm.use_kl_loss: keep the frozen reference policy in host memory (FSDP: its shards, "
        "CPUOffloadPolicy; replicated: moved to the device for each step's reference forwards)."
    )
    lora: LoraConfig | None = Field(
        None, description="Train LoRA adapters on the frozen base (peft) instead of every weight; None = full "
        "fine-tuning. With bfloat16 the frozen base is held in bf16 (adapters fp32); the weight sync, checkpoints "
        "and exports then carry the adapters only (docs/lora.md)."
    )

    grad_sync: Literal["last_micro_batch", "every_micro_batch"] = Field(
        "every_micro_batch",
        description="With fsdp: when gradients are reduce-scattered. every_micro_batch: after each micro-batch "
        "(gradients stay sharded, 4 B/parameter / W; one reduce-scatter per micro-batch, as torchtitan and verl); "
        "last_micro_batch: once per optimizer step (fewer collectives, but each rank holds the unsharded fp32 "
        "gradients of the whole model, 4 B/parameter, between micro-batches: the dry-run refuses it where that "
        "does not fit the GPU). A replicated model (fsdp=false) all-reduces once per optimizer step whatever it says "
        "(runs saved before every_micro_batch became the default name last_micro_batch there).",
    )
    lm_head_chunk_tokens: Literal["auto"] | Annotated[int, Field(ge=0)] = Field(
        "auto", description="Positions per chunk of the trainer's LM head: the final hidden states go through the "
        "head and the float32 log-softmax that many positions at a time, so the (rows x positions x vocab) logits "
        "and their gradient are never held whole (same log-probs and gradients). 0 = the model's own head (full "
        "logits); auto = chunks of 880 positions at a 152k vocabulary (4 x the 128 MiB float32 chunks of the log-probs) in a forward whose "
        "logits would hold >= 2^29 values (1 GiB in bf16), the model's own head below that. Needs a plain linear "
        "head (no soft-capping, no LoRA on the head): auto keeps such a model's own head, a number is refused."
    )
    pack_rows: Literal["auto"] | bool = Field(
        "auto", description="Forward a micro-batch's rows packed, with no padding between them (position ids "
        "restarting at 0 per row, a block-causal mask), for the policy, pi_old and reference log-probs: the same "
        "log-probs, loss and gradients as padded rows. auto: on where the model's attention keeps packed rows apart "
        "(a transformers decoder with sdpa, eager, flash or flex attention) and loop.micro_batch_size > 1; the run's "
        "log says the choice. true: on, refused on a model that cannot; false: padded rows."
    )
    gpu_memory_gib: float | None = Field(
        None, gt=0, description="Memory of one trainer GPU in GiB, for the dry-run's fit check (e.g. 79.6 for an "
        "H100 80GB); None = the visible GPU's, and no check where none is visible."
    )

    @model_validator(mode="after")
    def _offload_needs_fsdp(self) -> "ModelConfig":
        if self.cpu_offload and not self.fsdp:
            raise ValueError("model.cpu_offload needs model.fsdp=true (it offloads FSDP shards): set both or neither")
        return self
