"""What a run keeps on disk: checkpoints, HF and LoRA exports with their model cards, and the step commit that makes them visible as one unit."""
