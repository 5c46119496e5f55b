"""Where generation runs relative to the trainer on GPU, and what each phase of a step holds in
GPU memory (``docs/scaling.md``, "Colocated or separate generation").

- **Colocated** (``generator.vllm_mode: inprocess``): one engine per rank on the rank's own GPU.
  It cannot generate while the trainer updates on that GPU, so rollouts are synchronous
  (``loop.max_staleness_steps: 0``); with ``enable_sleep_mode`` the engine sleeps during the
  update (weights discarded, KV cache freed) and the weight sync wakes it.
- **Separate** (``vllm_mode: servers``): engines on GPUs of their own (the node's GPUs after the
  trainer's) or on other machines (``server_urls``); they generate while the trainer updates, which
  is what async rollouts (``max_staleness_steps >= 1``) need.

On CPU there is no GPU memory to share and vLLM's sleep is a no-op: every mix runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swerl.inference.config import InferenceConfig

if TYPE_CHECKING:
    from swerl.trainer.config import TrainConfig

BF16_BYTES = 2


def colocation_problem(gen: InferenceConfig, max_staleness_steps: int, on_gpu: bool) -> str | None:
    """The one-line refusal of a config whose generation and training cannot both hold, or None.

    Args:
        gen: the generator's settings. max_staleness_steps: ``loop.max_staleness_steps`` (k).
        on_gpu: the trainer runs on GPU (on CPU an in-process engine may generate during the update).
    """
    if gen.backend != "vllm":
        return None
    if gen.vllm_mode == "inprocess" and max_staleness_steps >= 1 and on_gpu:
        return (f"loop.max_staleness_steps={max_staleness_steps} generates while the trainer updates, but "
                "generator.vllm_mode=inprocess shares each rank's GPU with the trainer (it sleeps during the update); "
                "fix: set loop.max_staleness_steps=0, or generator.vllm_mode=servers (servers on GPUs of their own, "
                "or generator.server_urls)")
    if gen.vllm_mode == "servers" and gen.enable_sleep_mode:
        return ("generator.enable_sleep_mode=true is read by an in-process engine only: servers run on GPUs of "
                "their own and never sleep; fix: remove it, or set generator.vllm_mode=inprocess")
    return None


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
    share = f"{gen.gpu_memory_utilization:g} of the GPU" + (
        f" = {_bytes(gen.gpu_memory_utilization * gpu_total_bytes)}" if gpu_total_bytes else "")
    trainer = f"trainer state {state} + activations"
    if gen.backend != "vllm":
        return [("GPU memory, rollouts", f"trainer state {state} + the KV cache of HF generate (live module)"),
                ("GPU memory, update", trainer)]
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
