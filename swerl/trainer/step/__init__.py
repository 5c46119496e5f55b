"""The training step's update: trajectory rows, the micro-batched policy update, the KL reference, AdamW, and its guards."""
