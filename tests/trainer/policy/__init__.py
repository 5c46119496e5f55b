"""Tests of ``swerl/trainer/policy/``: loading, FSDP2 sharding and placement, LoRA."""
