"""What a run reports: metrics records and sinks, experiment trackers, the task health ledger and the quarantine it drives."""
