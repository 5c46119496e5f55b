"""swerl.inference stage: token ids in; token ids, sampling log-probs (mu) and a finish reason out.

Modules: ``base`` (SamplingParams, Generation, GenerationBackend), ``sampling`` (processed
log-prob math), ``hf`` (transformers backend), ``vllm_backend`` (in-process vLLM), ``openai_backend``
(OpenAI-compatible server), ``batcher`` (AsyncBatcher for concurrent episodes), ``models``
(model resolution, GGUF -> cached HF folder), ``config`` (InferenceConfig), ``factory``
(make_backend, make_batcher), ``probe`` (backend/trainer log-prob parity), ``rng`` (process RNG
state capture/restore, shared with trainer checkpoints). Nothing heavy is
imported here, so ``import swerl.inference`` stays cheap.
"""
