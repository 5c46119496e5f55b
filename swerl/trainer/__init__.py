"""swerl.trainer stage: the training loop (``loop.py``) and the rooms it calls, on floors (lowest first):
the ground at this level (``config.py`` with ``model_config.py``, ``sections.py`` and
``colocation.py``: the one config; ``distributed.py``: ranks and collectives) -> ``tracking/``
(metrics, trackers) -> ``policy/`` (loading, FSDP2, LoRA) -> ``step/`` (the update, the KL
reference) -> ``rollouts/`` (sampler, quarantine, concurrency, generator, pipeline, eval) ->
``persistence/`` (checkpoints, exports, commit) -> ``setup/`` (auto, plan, preflight) -> ``loop.py``
and ``eval_from_run.py`` (``swerl eval --from-run``). A module imports its floor or a lower one
(``tests/test_imports.py``)."""
