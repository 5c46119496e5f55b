"""A pytest plugin that records, per test, the project functions it called (a swerl mining file).

It runs inside the sandbox, not in swerl: standard library only, Python >= 3.8. Load it with
``-p swerl_trace`` (its folder on ``PYTHONPATH``); ``SWERL_TRACE_ROOT`` is the project folder and
``SWERL_TRACE_OUT`` the JSON file it writes at the end of the session::

    {"tests": {nodeid: {"outcome": "passed" | "failed" | "skipped",
                        "calls": [[relative path, first line of the code object], ...]}}}

A call counts during the test's setup, call and teardown (a fixture that calls the function
counts too). Only code objects whose file lies under the root count; ``sys.setprofile`` (and
``threading.setprofile`` for threads started by the test) sees every Python call, one cheap
dictionary look-up per call.
"""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest

_ROOT = os.path.realpath(os.environ.get("SWERL_TRACE_ROOT", os.getcwd())) + os.sep
_OUT = os.environ.get("SWERL_TRACE_OUT", "swerl_trace.json")
_results: dict = {}
_where: dict = {}  # code object -> (relative path, first line) or None when outside the root
_current: set = set()


def _profile(frame, event, arg):  # noqa: ANN001, ANN202 - the sys.setprofile signature
    if event != "call":
        return
    code = frame.f_code
    key = _where.get(code, False)
    if key is False:
        name = code.co_filename
        path = os.path.realpath(name) if name and os.path.isabs(name) else ""  # not '<frozen os>', '<string>'

        key = (path[len(_ROOT):], code.co_firstlineno) if path.startswith(_ROOT) else None
        _where[code] = key
    if key is not None:
        _current.add(key)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # noqa: ANN001, ANN201
    _current.clear()
    sys.setprofile(_profile)
    threading.setprofile(_profile)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        entry = _results.setdefault(item.nodeid, {"outcome": "passed", "calls": []})
        entry["calls"] = sorted(_current)
        _current.clear()


def pytest_runtest_logreport(report):  # noqa: ANN001, ANN201
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "calls": []})
    if report.failed:
        entry["outcome"] = "failed"
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"


def pytest_sessionfinish(session, exitstatus):  # noqa: ANN001, ANN201
    with open(_OUT, "w", encoding="utf-8") as fh:
        json.dump({"tests": _results}, fh)
