"""Tests of ``swerl/trainer/rollouts/``: sampler, quarantine, concurrency, generator, pipeline, eval."""
