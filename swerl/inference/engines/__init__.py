"""vLLM engines in process (thread, pump, sleep state) or as OpenAI servers (processes, GPUs), and their pool."""
