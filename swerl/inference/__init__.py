"""swerl.inference stage: token ids in; token ids, sampling log-probs (mu), a finish reason and the
weight version out.

Modules: ``base`` (SamplingParams, Generation, GenerationBackend, ContinuousBackend), ``sampling``
(processed log-prob math), ``hf`` (transformers backend), ``vllm_backend`` (in-process vLLM engine),
``engine_thread`` (its owner thread), ``engine_pump`` (its continuous batching loop),
``engine_state`` (its sleep/wake state machine), ``vllm_server`` (vLLM OpenAI servers: start,
token-in/token-out client, reload), ``vllm_worker`` (code run inside vLLM workers: weight reload +
tied-head re-pack), ``engine_pool`` (several engines behind one backend), ``gpu_placement`` (which
GPUs a rank's servers take), ``weight_sync/`` (the WeightSync interface and its implementations:
HF module share/copy, disk reload, NCCL), ``openai_backend`` (any OpenAI-compatible server),
``batcher`` (RequestStream and AsyncBatcher for concurrent episodes), ``model_files`` (model
resolution, GGUF -> cached HF folder), ``config`` (InferenceConfig), ``factory`` (make_backend,
build_vllm, make_batcher), ``probe`` (engine/trainer log-prob parity), ``rng`` (process RNG state
capture/restore, shared with trainer checkpoints). Nothing heavy is
imported here, so ``import swerl.inference`` stays cheap. See ``docs/inference.md``.
"""
