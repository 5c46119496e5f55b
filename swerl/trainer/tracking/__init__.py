"""What a run reports: metrics records and sinks, experiment trackers, task health and the quarantine."""
