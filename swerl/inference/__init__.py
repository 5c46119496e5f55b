"""swerl.inference stage: token ids in; token ids, sampling log-probs (mu), a finish reason and the
weight version out.

Rooms, lowest first: the ground floor (``config``: one model per backend, HFGenerator, VLLMGenerator,
OpenAIGenerator, and their union InferenceConfig; ``model_files``: a path, a
GGUF or the default model -> an HF folder; ``machine``: the bf16/fp32 matmul probe; ``rng``:
process RNG state capture/restore, shared with trainer checkpoints; ``gather``: the full tensor of an
FSDP shard, which the weight syncs and the trainer's exports send or write) -> ``backends/`` (the
contract ``base``, ``hf``, ``openai_backend``, the async ``batcher``, the ``sampling`` math) ->
``engines/`` (vLLM: in process with its thread, pump and sleep state, or as OpenAI servers with
their processes and GPU placement; the worker extension; the pool over several engines) ->
``weight_sync/`` (the WeightSync interface and its implementations: HF module share, disk
reload, NCCL, LoRA adapters) -> the modules that join them: ``factory`` (make_backend,
build_backend: one builder per config type, build_vllm, make_batcher) and ``probe``
(engine/trainer log-prob parity). Nothing heavy is imported here, so ``import swerl.inference`` stays cheap. See ``docs/inference.md``.
"""
