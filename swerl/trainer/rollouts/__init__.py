"""Each step's batch: prompt sampler, generator and weight publishing, rollout runner, pipeline, held-out eval."""
