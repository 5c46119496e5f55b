"""The training step's update: trajectory rows, the micro-batched policy update, AdamW, and its guards."""
