"""``swerl tasks mine``: pymethods2test tasks from a pure-Python project's own test suite.

- ``project.py``: unpack a folder, sdist or wheel into a clean copy (no VCS, bytecode, build copies).
- ``swerl_trace.py``: the pytest plugin, run in the sandbox, that records the calls of each test.
- ``functions.py``: a file's functions and methods, their bodies, the stub, what is trivial.
- ``candidates.py``: the functions with the tests that call them (stable tests only).
- ``repository.py``: the task's /app: body stubbed, covering tests out, every other copy of the body out.
- ``task.py``: one task folder (Harbor 1.3, clean room, swerl's hardened verifier).
- ``manifest.py``: ``manifest.json``, every candidate kept or dropped with the reason.
- ``pipeline.py``: the steps that need no sandbox, in order (``swerl.cli.mine`` adds the sandbox ones).
"""
