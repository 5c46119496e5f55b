"""What a run keeps on disk: checkpoints, HF and LoRA exports with model cards, and the step commit."""
