"""swerl.inference stage: token ids in; token ids, sampling log-probs (mu), a finish reason and the
weight version out.

Modules: ``base`` (SamplingParams, Generation, GenerationBackend), ``sampling`` (processed
log-prob math), ``hf`` (transformers backend), ``vllm_backend`` (in-process vLLM engine),
``vllm_server`` (vLLM OpenAI servers: start, token-in/token-out client, reload), ``vllm_worker``
(code run inside vLLM workers: weight reload + tied-head re-pack), ``engine_pool`` (several
engines behind one backend), ``weight_sync`` (weights to safetensors for the engines; NCCL path),
``openai_backend`` (any OpenAI-compatible server), ``batcher`` (AsyncBatcher for concurrent
episodes), ``model_files`` (model resolution, GGUF -> cached HF folder), ``config`` (InferenceConfig),
``factory`` (make_backend, build_vllm, make_batcher), ``probe`` (engine/trainer log-prob parity),
``rng`` (process RNG state capture/restore, shared with trainer checkpoints). Nothing heavy is
imported here, so ``import swerl.inference`` stays cheap. See ``docs/inference.md``.
"""
