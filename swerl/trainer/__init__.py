"""swerl.trainer stage: the training loop (``loop.py``) and the rooms it calls: ``setup/`` (config,
plan, preflight), ``policy/``, ``rollouts/``, ``step/`` (the update), ``persistence/`` (checkpoints,
exports, commit) and ``tracking/`` (metrics, trackers, task health); ``eval_from_run.py`` serves
``swerl eval --from-run``."""
