"""What a run reports: metrics records and sinks, experiment trackers."""
