"""The policy being trained: loading, FSDP2 sharding, LoRA adapters."""
