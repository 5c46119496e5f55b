"""The training step's update: trajectory rows, the micro-batched policy update (its LM head chunked over positions where the logits are large), the KL reference, AdamW, and its guards."""
