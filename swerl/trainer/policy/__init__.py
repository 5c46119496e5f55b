"""The policy being trained: loading it, its ranks (data parallel, FSDP2), LoRA adapters, and the frozen reference policy of the KL term."""
