"""The policy being trained: loading, ranks (data parallel, FSDP2), LoRA adapters, the KL reference."""
