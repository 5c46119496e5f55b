"""Each step's batch: prompt sampler and quarantine, the sandbox limits per rank, generator and weight
publishing, rollout runner, pipeline, held-out eval."""
