"""Run setup: auto resolved for this machine, the run plan and its sizing, and the preflight."""
