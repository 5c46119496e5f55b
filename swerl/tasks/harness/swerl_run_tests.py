"""Run the hidden tests with a pinned pytest and write the reward (a swerl verifier file).

``python3 -I -S swerl_run_tests.py --expect N --reward FILE [--tests-dir DIR] TEST ...`` (``tests/test.sh``
runs it; each ``TEST`` a test file or a pytest node id such as ``/tests/repo/test_x.py::test_y``; ``DIR``,
default the first test's folder, holds ``pytest.ini`` and is pytest's root):

1. Starts pytest in a child process (forked, so it starts with none of the interpreter's
   start-up cost twice) with a clean environment (``PYTEST_ADDOPTS``, ``PYTEST_PLUGINS``,
   ``PYTHONPATH`` gone; plugin autoload off), ``-I -S`` (no ``.pth``, ``sitecustomize`` or
   current-folder imports; the child inherits them), no bytecode read or written (below),
   the ini file pinned with ``-c`` beside
   ``TEST_FILE``, ``--rootdir`` that folder and ``--noconftest`` (no ``pytest.ini`` or
   ``conftest.py`` planted in ``/``, ``/app`` or elsewhere is read), no cache.
2. Reads pytest's JUnit XML report through a pipe opened now (``--junitxml=/dev/fd/N``),
   so no file the solution could write ahead of time, or race to rewrite, is trusted.
3. After pytest exits, kills every process it left (this process is their subreaper).
   pytest's own output goes through a pipe into this process's memory and is printed only
   then, so nothing the tests print (``-v`` writes each test's id, and a parametrized id holds
   its expected value) can be watched growing in ``/logs/verifier/test-stdout.txt`` while a
   solution's worker runs.
0. An isolated task's solution needs Landlock to be confined (``swerl_solution_proxy.py``);
   where it is missing, ``FILE`` is left empty (no reward: the infrastructure cannot judge) and
   the runner exits 3. Landlock does not stop ``stat``, so on such a task the collected test
   files are deleted once pytest has read them (before any test calls the solution and its
   worker starts): their sizes would tell the worker the length of the expected values.
4. Writes ``1`` to ``FILE`` only when pytest exited 0 and the report holds exactly ``N``
   test cases, all passed (none failed, errored, skipped or xfailed); else ``0``. Prints
   one summary line.

No bytecode of anyone else's is ever read: ``tests/test.sh`` starts this runner with
``-X pycache_prefix=`` an empty folder it just made (else the runner sets ``sys.pycache_prefix``
to one of its own first), so no ``__pycache__`` under ``/app`` or the library folders is read
(an unchecked hash-based pyc, PEP 552, is imported without its source being looked at), and
:func:`source_only_imports` drops the sourceless-bytecode loader, so a ``solution.pyc`` without a
``solution.py`` is no module. Every module is compiled from its source.

Both processes make themselves non-dumpable, so a same-user process cannot read their
memory or open their pipes through ``/proc``. Standard library only; Python >= 3.8.
"""

from __future__ import annotations

import os
import signal
import sys
import time

MAX_REPORT_BYTES = 16 * 1024 * 1024
MAX_OUTPUT_BYTES = 4 * 1024 * 1024  # pytest's output kept for the log (the rest is counted)
_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36
_CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def source_only_imports() -> None:
    """Import modules of folders only from source (and extension modules), never from bytecode:
    a fresh empty ``sys.pycache_prefix`` unless the command line gave one, and the path hook of
    folders rebuilt without the sourceless ``.pyc`` loader. Call before any other import."""
    from importlib import machinery

    if sys.pycache_prefix is None:
        sys.pycache_prefix = _scratch_dir("swerl-pycache")
    hook = machinery.FileFinder.path_hook((machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
                                          (machinery.SourceFileLoader, machinery.SOURCE_SUFFIXES))
    sys.path_hooks[:] = [hook if "FileFinder" in getattr(h, "__qualname__", "") else h for h in sys.path_hooks]
    sys.path_importer_cache.clear()


def _prctl(option: int, value: int) -> None:
    import ctypes

    try:
        ctypes.CDLL(None).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to harden
        pass


def judge_report(report: bytes, exit_code: int, expected: int) -> tuple[float, str]:
    """The reward (1.0 or 0.0) and a one-line summary from pytest's JUnit XML and exit status."""
    import xml.etree.ElementTree as ET  # only the judge needs it, after pytest has ended

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


def _scratch_dir(kind: str = "swerl-pytest") -> str:
    """A new private folder under /tmp (an unguessable name; never one that already exists)."""
    while True:
        path = f"/tmp/{kind}-{os.urandom(8).hex()}"
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


def run_pytest(tests: list[str], tests_dir: str, report_fd: int, parent_fd: int, output: tuple[int, int] | None = None,
               hide_tests: bool = False) -> int:
    """Fork the pinned pytest child running ``tests`` with ``tests_dir``'s ``pytest.ini`` and writing
    its JUnit report to ``report_fd`` (``parent_fd``, the pipe's read end, is closed in the child);
    returns its pid. ``output``: a pipe ``(read end, write end)`` that takes the child's stdout and
    stderr (the read end closed in the child). ``hide_tests``: delete the collected test files under
    ``tests_dir`` once collection is over (an isolated task, see the module's docstring).

    The child is this interpreter forked (same ``-I -S`` flags), so it pays no second start-up;
    it holds nothing the solution could use (the expected count and the reward path are on
    this process's command line anyway).
    """
    import site

    site_dirs = [p for p in site.getsitepackages() if os.path.isdir(p)]
    scratch = _scratch_dir()
    args = ["-c", os.path.join(tests_dir, "pytest.ini"), "--rootdir", tests_dir, "--noconftest",
            "-p", "no:cacheprovider", "-v", "--tb=short", f"--junitxml=/dev/fd/{report_fd}", *tests]
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.close(parent_fd)
        if output is not None:
            os.close(output[0])
            os.dup2(output[1], 1)
            os.dup2(output[1], 2)
            os.close(output[1])
        os.environ.clear()
        os.environ.update({"PATH": _CLEAN_PATH, "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8",
                           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
        os.chdir(scratch)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        code = _pytest_child(site_dirs, args, tests_dir if hide_tests else None)
    except BaseException:  # noqa: BLE001 - the child never returns into the parent's code
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class HideCollected:
    """A pytest plugin: once collection is over, delete the collected test files under ``tests_dir``
    (pytest holds their compiled tests; nothing on disk tells a worker started later how long the
    expected values are)."""

    def __init__(self, tests_dir: str) -> None:
        self.tests_dir = os.path.join(os.path.realpath(tests_dir), "")

    def pytest_collection_finish(self, session) -> None:  # noqa: ANN001 - pytest.Session
        for path in sorted({os.path.realpath(str(getattr(item, "path", None) or item.fspath)) for item in session.items}):
            if path.startswith(self.tests_dir):
                try:
                    os.unlink(path)
                except OSError:
                    pass


def _pytest_child(site_dirs: list[str], args: list[str], hide_under: str | None = None) -> int:
    """In the child: add site-packages by hand (no ``.pth`` runs), then run pytest (with
    :class:`HideCollected` for ``hide_under``)."""
    _prctl(_PR_SET_DUMPABLE, 0)
    sys.dont_write_bytecode = True
    sys.path += [p for p in site_dirs if p not in sys.path]
    import pytest

    return int(pytest.main(args, plugins=[HideCollected(hide_under)] if hide_under else []))


class _Drain:
    """Reads a pipe to its end on a thread, keeping at most ``cap`` bytes (the rest counted)."""

    def __init__(self, fd: int, cap: int) -> None:
        import threading

        self.fd, self.cap, self.kept, self.size = fd, cap, [], 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with os.fdopen(self.fd, "rb") as pipe:
            for chunk in iter(lambda: pipe.read(65536), b""):
                if self.size < self.cap:
                    self.kept.append(chunk[: self.cap - self.size])
                self.size += len(chunk)

    def text(self, wait_s: float) -> str:
        """What was read once the pipe ended (or ``wait_s`` passed), with a line naming what was left out."""
        self.thread.join(wait_s)
        out = b"".join(self.kept).decode("utf-8", "replace")
        if self.size > self.cap:
            out += f"\n[swerl_run_tests: {self.size - self.cap} more bytes of pytest output left out]\n"
        return out


USAGE = "usage: python3 -I -S swerl_run_tests.py --expect N --reward FILE [--tests-dir DIR] TEST ..."


def parse_args(argv: list[str]) -> tuple[int, str, str, list[str]]:
    """``(expected, reward file, tests folder, tests)`` from the command line; exits 2 with the usage otherwise."""
    opts: dict[str, str] = {}
    rest: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg in ("--expect", "--reward", "--tests-dir"):
            opts[arg] = next(it, "")
        else:
            rest.append(arg)
    try:
        expected = int(opts["--expect"])
        if not opts["--reward"] or not rest or opts.get("--tests-dir") == "":
            raise ValueError
    except (KeyError, ValueError):
        print(USAGE, file=sys.stderr)
        raise SystemExit(2) from None
    tests_dir = opts.get("--tests-dir") or os.path.dirname(os.path.abspath(rest[0].split("::")[0]))
    return expected, opts["--reward"], os.path.abspath(tests_dir), rest


def confinement_problem(tests_dir: str) -> str:
    """Why the solution of an isolated task (``swerl_solution_proxy.py`` beside the tests) cannot
    be confined here, else "". Without Landlock its worker would run unconfined (it could read
    the hidden tests and write the reward), so it refuses, and no reward is a verdict then."""
    proxy = os.path.join(tests_dir, "swerl_solution_proxy.py")
    if not os.path.isfile(proxy):
        return ""
    import importlib.util

    spec = importlib.util.spec_from_file_location("swerl_solution_proxy", proxy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.landlock_abi() < 1:
        return "Landlock is unavailable here (kernel or OCI runtime), so the solution cannot be confined"
    return ""


def main(argv: list[str] | None = None) -> int:
    source_only_imports()
    expected, reward_file, tests_dir, tests = parse_args(sys.argv[1:] if argv is None else argv)
    problem = confinement_problem(tests_dir)
    if problem:  # the infrastructure cannot judge: no reward (the trial's control run fails too: masked)
        open(reward_file, "w").close()
        print(f"swerl_run_tests: {problem}; no reward written", flush=True)
        return 3
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    read_fd, write_fd = os.pipe()
    out_r, out_w = os.pipe()
    isolated = os.path.isfile(os.path.join(tests_dir, "swerl_solution_proxy.py"))
    child = run_pytest(tests, tests_dir, write_fd, read_fd, (out_r, out_w), hide_tests=isolated)
    os.close(write_fd)
    os.close(out_w)
    output = _Drain(out_r, MAX_OUTPUT_BYTES)  # started after the fork: the child has no thread
    chunks, size = [], 0
    with os.fdopen(read_fd, "rb") as pipe:
        for chunk in iter(lambda: pipe.read(65536), b""):  # drain to EOF; keep at most the cap
            size += len(chunk)
            if size <= MAX_REPORT_BYTES:
                chunks.append(chunk)
    status = os.waitpid(child, 0)[1]
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    kill_descendants()
    sys.stdout.write(output.text(wait_s=10.0))  # every writer is gone: the pipe has ended
    reward, summary = judge_report(b"".join(chunks) if size <= MAX_REPORT_BYTES else b"", exit_code, expected)
    with open(reward_file, "w") as fh:
        fh.write(f"{reward:g}\n")
    print(f"swerl_run_tests: {summary} -> reward {reward:g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
