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

from swerl.inference.config import TrainGenerator, VLLMGenerator


def colocation_problem(gen: TrainGenerator, max_staleness_steps: int, on_gpu: bool) -> str | None:
    """The one-line refusal of a config whose generation and training cannot both hold, or None.

    Args:
        gen: the generator's settings. max_staleness_steps: ``loop.max_staleness_steps`` (k).
        on_gpu: the trainer runs on GPU (on CPU an in-process engine may generate during the update).
    """
    if not isinstance(gen, VLLMGenerator):
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
