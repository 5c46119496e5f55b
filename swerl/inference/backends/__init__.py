"""Generation backends behind one contract: HF generate, OpenAI-compatible servers, the batcher, sampling math."""
