"""Run setup: the config, ``auto`` resolved for this machine, the run plan and its sizing (memory, model size, sandbox limits, GPU placement), and the preflight."""
