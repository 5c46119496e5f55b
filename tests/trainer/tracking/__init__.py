"""Tests of ``swerl/trainer/tracking/``: metrics records and sinks, experiment trackers."""
