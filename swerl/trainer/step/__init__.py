"""The training step's update: rows from trajectories, the micro-batched policy update, AdamW and its schedule, and the guards against non-finite gradients and mostly-masked steps."""
