"""Run the hidden tests with a pinned pytest and write the reward (a swerl verifier file).

``python3 -I -S swerl_run_tests.py --expect N --reward FILE TEST_FILE`` (``tests/test.sh`` runs it):

1. Starts pytest in a child process with a clean environment (``PYTEST_ADDOPTS``,
   ``PYTEST_PLUGINS``, ``PYTHONPATH`` gone; plugin autoload off), ``-I -S`` (no ``.pth``,
   ``sitecustomize`` or current-folder imports), the ini file pinned with ``-c`` beside
   ``TEST_FILE``, ``--rootdir`` that folder and ``--noconftest`` (no ``pytest.ini`` or
   ``conftest.py`` planted in ``/``, ``/app`` or elsewhere is read), no cache.
2. Reads pytest's JUnit XML report through a pipe opened now (``--junitxml=/dev/fd/N``),
   so no file the solution could write ahead of time, or race to rewrite, is trusted.
3. After pytest exits, kills every process it left (this process is their subreaper).
4. Writes ``1`` to ``FILE`` only when pytest exited 0 and the report holds exactly ``N``
   test cases, all passed (none failed, errored, skipped or xfailed); else ``0``. Prints
   one summary line.

Both processes make themselves non-dumpable, so a same-user process cannot read their
memory or open their pipes through ``/proc``. Standard library only; Python >= 3.8.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

MAX_REPORT_BYTES = 16 * 1024 * 1024
_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36
_CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to harden
        pass


def judge_report(report: bytes, exit_code: int, expected: int) -> tuple[float, str]:
    """The reward (1.0 or 0.0) and a one-line summary from pytest's JUnit XML and exit status."""
    try:
        root = ET.fromstring(report) if report.strip() else None
    except ET.ParseError as err:
        return 0.0, f"JUnit report unreadable ({err}); pytest exit {exit_code}"
    if root is None:
        return 0.0, f"no JUnit report (pytest exit {exit_code}: it died or was stopped before reporting)"
    cases = list(root.iter("testcase"))
    counts = {"passed": 0, "failure": 0, "error": 0, "skipped": 0}
    for case in cases:
        outcomes = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        for tag in set(outcomes):
            counts[tag] += 1
        counts["passed"] += not outcomes
    for suite in root.iter("testsuite"):  # a collection error may only show in the suite's attributes
        for attr, key in (("errors", "error"), ("failures", "failure"), ("skipped", "skipped")):
            try:
                counts[key] = max(counts[key], int(suite.get(attr, "0") or 0))
            except ValueError:
                return 0.0, f"JUnit report has a malformed {attr}= attribute; pytest exit {exit_code}"
    ok = exit_code == 0 and len(cases) == expected and counts["passed"] == expected and not (
        counts["failure"] or counts["error"] or counts["skipped"])
    summary = (f"{counts['passed']}/{expected} expected tests passed ({len(cases)} reported, {counts['failure']} failed, "
               f"{counts['error']} errors, {counts['skipped']} skipped or xfailed); pytest exit {exit_code}")
    return (1.0 if ok else 0.0), summary


def _descendants(root_pid: int) -> list[int]:
    """Pids whose parent chain (read from /proc) reaches ``root_pid``."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read()
                parents[int(entry)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = set(), {root_pid}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier and pid not in found}
        found |= frontier
    return sorted(found)


def kill_descendants(deadline_s: float = 5.0) -> int:
    """SIGKILL every descendant of this process and reap them; returns how many were killed."""
    killed, end = 0, time.monotonic() + deadline_s
    while time.monotonic() < end:
        pids = _descendants(os.getpid())
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.01)
    return killed


def run_pytest(test_file: str, report_fd: int) -> subprocess.Popen:
    """Start the pinned pytest child writing its JUnit report to ``report_fd``."""
    tests_dir = os.path.dirname(os.path.abspath(test_file))
    import site

    site_dirs = os.pathsep.join(p for p in site.getsitepackages() if os.path.isdir(p))
    scratch = tempfile.mkdtemp(prefix="swerl-pytest-")
    args = ["-c", os.path.join(tests_dir, "pytest.ini"), "--rootdir", tests_dir, "--noconftest",
            "-p", "no:cacheprovider", "-v", "--tb=short", f"--junitxml=/dev/fd/{report_fd}", test_file]
    env = {"PATH": _CLEAN_PATH, "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    argv = [sys.executable, "-I", "-S", "-B", os.path.abspath(__file__), "--pytest-child", site_dirs, "--", *args]
    return subprocess.Popen(argv, env=env, cwd=scratch, stdin=subprocess.DEVNULL, pass_fds=(report_fd,))


def _pytest_child(site_dirs: str, args: list[str]) -> int:
    """In the child: add site-packages by hand (no ``.pth`` runs), then run pytest."""
    _prctl(_PR_SET_DUMPABLE, 0)
    sys.path += [p for p in site_dirs.split(os.pathsep) if p and p not in sys.path]
    import pytest

    return int(pytest.main(args))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--pytest-child"]:
        return _pytest_child(argv[1], argv[3:])
    parser = argparse.ArgumentParser(description="Run hidden tests with a pinned pytest; write the reward.")
    parser.add_argument("--expect", type=int, required=True, help="Number of test cases that must pass.")
    parser.add_argument("--reward", required=True, help="Reward file to write (1 or 0).")
    parser.add_argument("test_file")
    opts = parser.parse_args(argv)
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    read_fd, write_fd = os.pipe()
    child = run_pytest(opts.test_file, write_fd)
    os.close(write_fd)
    chunks, size = [], 0
    with os.fdopen(read_fd, "rb") as pipe:
        for chunk in iter(lambda: pipe.read(65536), b""):  # drain to EOF; keep at most the cap
            size += len(chunk)
            if size <= MAX_REPORT_BYTES:
                chunks.append(chunk)
    exit_code = child.wait()
    kill_descendants()
    reward, summary = judge_report(b"".join(chunks) if size <= MAX_REPORT_BYTES else b"", exit_code, opts.expect)
    with open(opts.reward, "w") as fh:
        fh.write(f"{reward:g}\n")
    print(f"swerl_run_tests: {summary} -> reward {reward:g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
