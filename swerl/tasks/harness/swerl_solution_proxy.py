"""Call the solution's functions in a separate, confined worker process (a swerl verifier file).

The hidden tests run ``f = solution_function("f")`` instead of ``from solution import f``
(``solution_function("f", "/app", "pkg.mod", ["/app/src", "/app"])`` for ``from pkg.mod import f``
of a repository whose import roots are ``/app/src`` and ``/app``: a mined task)
(and ``C = solution_class("C")`` instead of ``from solution import C``: ``C(...)`` makes the
instance inside the worker and hands back a handle whose method calls run there, so a class
with state is judged by the plain values its methods return):
the judging pytest process never imports the solution. Each call sends its arguments to
one worker process (``python3 -I -S -B -X pycache_prefix=EMPTY this_file worker ...``), which imports the solution
and answers with the result. Both directions cross as tagged JSON of plain builtin values
with exact types (None, bool, int, float, complex, str, bytes, list, tuple, dict, set,
frozenset), so a result that is not a plain value (an object whose ``__eq__`` always answers
True, a ``str`` subclass, a generator) fails its test, and ``os._exit``, ``pytest.skip``,
``sys.exit`` or patched builtins inside the solution can only end or break the worker.

Before importing the solution the worker confines itself with Landlock (Linux >= 5.13, no
privileges needed): it may read only the interpreter's folders, system folders and the
solution folder, may write only a scratch folder, and (Landlock ABI >= 6, Linux >= 6.12)
may not signal processes outside itself. So it cannot read ``/tests``, write
``/logs/verifier``, or kill the judge. Where Landlock is missing it does not import the solution
(fail closed; the runner then writes no reward, see ``swerl_run_tests.py``) and says
so on stderr. Standard library only; Python >= 3.8.
"""

from __future__ import annotations

import json
import os
import sys

# The worker starts a fresh interpreter per solution: it imports only what it uses (the judge
# side's subprocess/tempfile/select are imported where used, already loaded by pytest there).

MAX_LINE_BYTES = 64 * 1024 * 1024
_TAGS = {"l": list, "t": tuple, "s": set, "f": frozenset}
_SCALARS = (type(None), bool, int, float, str)


# --- codec: plain builtin values with exact types <-> JSON -------------------------


def encode(value):
    """A JSON-ready tree of ``value``; raises TypeError for anything but plain builtin values."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind in (list, tuple, set, frozenset):
        tag = {list: "l", tuple: "t", set: "s", frozenset: "f"}[kind]
        return {tag: [encode(item) for item in value]}
    if kind is dict:
        return {"d": [[encode(k), encode(v)] for k, v in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    raise TypeError(f"a {kind.__module__}.{kind.__qualname__} is not a plain builtin value "
                    "(results must be exactly None/bool/int/float/complex/str/bytes/list/tuple/dict/set)")


def decode(tree):
    """Inverse of :func:`encode`; raises ValueError for any tree :func:`encode` cannot make."""
    kind = type(tree)
    if kind in _SCALARS:
        return tree
    if kind is not dict or len(tree) != 1:
        raise ValueError(f"malformed value from the solution worker: {str(tree)[:80]}")
    (tag, body), = tree.items()
    if tag in _TAGS and type(body) is list:
        return _TAGS[tag](decode(item) for item in body)
    if tag == "d" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
        return {decode(k): decode(v) for k, v in body}
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) is float for x in body):
        return complex(body[0], body[1])
    raise ValueError(f"malformed value from the solution worker: {str(tree)[:80]}")


def _send(stream, message) -> None:
    stream.write(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")
    stream.flush()


def _receive(stream):
    line = stream.readline(MAX_LINE_BYTES)
    if not line:
        raise EOFError("the solution worker exited")
    if not line.endswith(b"\n"):
        raise ValueError(f"the solution worker sent more than {MAX_LINE_BYTES} bytes in one reply")
    return json.loads(line)


# --- judge side --------------------------------------------------------------------


class SolutionError(AssertionError):
    """The solution's call raised, returned a non-plain value, or its worker died.

    ``exc_type`` names the exception the call raised when it is a builtin one (exactly
    ``builtins.<name>``, e.g. "ValueError"), else None: tests that expect a raise check it.
    ``exc_base`` names the nearest builtin exception class the raised one derives from (the
    type itself when builtin; "ValueError" for a project's ``class ParseError(ValueError)``),
    None when the worker died or the result was not a plain value: ``pytest.raises(ValueError)``
    of a mined test accepts what it names a subclass of ``ValueError``."""

    def __init__(self, message: str, exc_type=None, exc_base=None) -> None:
        super().__init__(message)
        self.exc_type = exc_type
        self.exc_base = exc_base


class _Worker:
    """One worker process serving calls for one solution module."""

    def __init__(self, app_dir: str, module: str, roots=None) -> None:
        import subprocess
        import tempfile

        self.scratch = tempfile.mkdtemp(prefix="swerl-solution-")
        pycache = os.path.join(self.scratch, "pycache")  # empty: no bytecode of /app is ever read
        argv = [sys.executable, "-I", "-S", "-B", "-X", f"pycache_prefix={pycache}", os.path.abspath(__file__),
                "worker", app_dir, module, self.scratch, os.pathsep.join(roots or [])]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.scratch, "TMPDIR": self.scratch,
               "LANG": "C.UTF-8"}
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=app_dir, env=env,
                                     start_new_session=True)
        self.failure, self._buffer = None, bytearray()
        try:
            hello = self._reply()
        except (EOFError, ValueError) as err:
            self.failure = f"the solution worker died while importing {module} ({err}; exit {self.proc.wait()})"
            return
        if type(hello) is not dict or hello.get("ready") is not True:
            self.failure = str(hello.get("error") if type(hello) is dict else hello)[:2000]

    def call(self, name: str, args: tuple, kwargs: dict, handle=None):
        """``name(*args, **kwargs)`` of the module, or a method of the instance ``handle``."""
        request = {"call": name, "args": encode(tuple(args)), "kwargs": encode(dict(kwargs))}
        if handle is not None:
            request["handle"] = handle
        return self._ask(request, name, {"result"}, lambda reply: decode(reply["result"]))

    def new(self, name: str, args: tuple, kwargs: dict) -> int:
        """Make an instance of the class ``name`` in the worker; returns its handle."""
        request = {"new": name, "args": encode(tuple(args)), "kwargs": encode(dict(kwargs))}
        return self._ask(request, name, {"handle"}, lambda reply: reply["handle"] if type(reply["handle"]) is int
                         else self._malformed(reply))

    def _ask(self, request: dict, name: str, keys: set, read):
        if self.failure is not None:
            raise SolutionError(self.failure)
        try:
            _send(self.proc.stdin, request)
            reply = self._reply()
        except (BrokenPipeError, EOFError, ValueError) as err:
            self.failure = f"the solution worker died during {name}() ({err})"
            raise SolutionError(self.failure) from None
        if type(reply) is dict and set(reply) == keys:
            return read(reply)
        if (type(reply) is dict and set(reply) in ({"error", "type"}, {"error", "type", "base"})
                and type(reply["error"]) is str and all(reply.get(k) is None or type(reply[k]) is str
                                                        for k in ("type", "base"))):
            raise SolutionError(reply["error"][:2000], reply["type"], reply.get("base"))
        self._malformed(reply)

    @staticmethod
    def _malformed(reply):
        raise SolutionError(f"malformed reply from the solution worker: {str(reply)[:80]}")

    def _reply(self):
        """The worker's next line as JSON. EOF once the worker process itself has exited, even
        if a process it started still holds the pipe open."""
        import select

        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise ValueError(f"the solution worker sent more than {MAX_LINE_BYTES} bytes in one reply")
            if select.select([fd], [], [], 0.1)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise EOFError("the solution worker exited")
                self._buffer += chunk
            elif self.proc.poll() is not None:
                raise EOFError("the solution worker exited")
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return json.loads(line)

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except OSError:
            pass
        self.proc.wait()


_workers = {}


def solution_function(name: str, app_dir: str = "/app", module: str = "solution", roots=None):
    """A stand-in for ``from <module> import <name>`` whose calls run in the worker process.

    ``module`` may be dotted (``pkg.mod``); ``roots``: the folders the worker imports it from, first
    on its ``sys.path`` (each readable by it), default ``[app_dir]``."""

    def call(*args, **kwargs):
        key = (app_dir, module, tuple(roots or ()))
        if key not in _workers:
            _workers[key] = _Worker(app_dir, module, roots)
        return _workers[key].call(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call


class _Instance:
    """A handle on an instance living in the worker: ``obj.method(*args)`` runs there."""

    def __init__(self, worker_key, class_name: str, handle: int) -> None:
        self._key, self._class, self._handle = worker_key, class_name, handle

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def method(*args, **kwargs):
            return _workers[self._key].call(name, args, kwargs, handle=self._handle)

        method.__name__ = method.__qualname__ = f"{self._class}.{name}"
        return method

    def __repr__(self) -> str:
        return f"<{self._class} instance #{self._handle} in the solution worker>"


def solution_class(name: str, app_dir: str = "/app", module: str = "solution"):
    """A stand-in for ``from <module> import <name>`` of a class: calling it makes the instance
    in the worker process and returns an :class:`_Instance` handle."""

    def new(*args, **kwargs):
        key = (app_dir, module, ())
        if key not in _workers:
            _workers[key] = _Worker(app_dir, module)
        return _Instance(key, name, _workers[key].new(name, args, kwargs))

    new.__name__ = new.__qualname__ = name
    return new


def close_workers() -> None:
    """Kill every worker process (also registered with ``atexit``)."""
    for worker in _workers.values():
        worker.close()
    _workers.clear()


import atexit  # noqa: E402 - after the definitions it registers

atexit.register(close_workers)


# --- worker side -------------------------------------------------------------------

_READ_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt")
_SYS_LANDLOCK = (444, 445, 446)  # create_ruleset, add_rule, restrict_self (same on x86_64 and arm64)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (``landlock_create_ruleset(NULL, 0, VERSION)``), < 1
    where there is none (an old kernel, or a runtime such as gVisor that does not implement it)."""
    import ctypes

    syscall = ctypes.CDLL(None, use_errno=True).syscall
    syscall.restype = ctypes.c_long
    return syscall(ctypes.c_long(_SYS_LANDLOCK[0]), None, ctypes.c_size_t(0), ctypes.c_uint32(1))


def confine(read_paths, write_paths) -> str:
    """Landlock this process: read/execute only ``read_paths``, write only ``write_paths``,
    and (ABI >= 6) signal no process outside it. Returns "" or why it could not."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = landlock_abi()
    if abi < 1:
        return f"Landlock unavailable ({os.strerror(ctypes.get_errno())})"
    handled = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0) | (1 << 15 if abi >= 5 else 0)
    file_rights = handled & (1 | 2 | 4 | 1 << 14 | 1 << 15)  # execute, write, read, truncate, ioctl
    attr = struct.pack("=QQQ", handled, 0, 3 if abi >= 6 else 0)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    ruleset = syscall(ctypes.c_long(_SYS_LANDLOCK[0]), ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"Landlock ruleset refused ({os.strerror(ctypes.get_errno())})"
    for path, rights in [(p, 1 | 4 | 8) for p in read_paths] + [(p, handled) for p in write_paths]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # a folder this image does not have
        allowed = rights if os.path.isdir(path) else rights & file_rights
        rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
        syscall(ctypes.c_long(_SYS_LANDLOCK[1]), ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0))
        os.close(fd)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, required by restrict_self
    if syscall(ctypes.c_long(_SYS_LANDLOCK[2]), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
        return f"Landlock restrict_self failed ({os.strerror(ctypes.get_errno())})"
    os.close(ruleset)
    return ""


def _error_line(err: BaseException) -> str:
    import traceback

    where = traceback.extract_tb(err.__traceback__)
    place = f" at {where[-1].filename}:{where[-1].lineno}" if where else ""
    return f"{type(err).__name__}: {err}{place}"


def source_only_imports() -> None:
    """Folders' modules from source (or extension modules) only: the path hook rebuilt without the
    sourceless ``.pyc`` loader (a ``solution.pyc`` without its ``solution.py`` is no module); the
    worker's ``-X pycache_prefix`` keeps any ``__pycache__`` of ``/app`` unread."""
    from importlib import machinery

    hook = machinery.FileFinder.path_hook((machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
                                          (machinery.SourceFileLoader, machinery.SOURCE_SUFFIXES))
    sys.path_hooks[:] = [hook if "FileFinder" in getattr(h, "__qualname__", "") else h for h in sys.path_hooks]
    sys.path_importer_cache.clear()


def serve(app_dir: str, module: str, scratch: str, roots: str = "") -> None:
    """Worker main: confine, import the solution (``module``, dotted or not, from the folders of
    ``roots``, ``os.pathsep``-separated, default ``app_dir``), answer calls on the original stdin/stdout.

    Runs under ``-I -S``: no ``.pth`` file, ``sitecustomize`` or environment variable is read;
    the interpreter's site-packages folders are added by hand (without running their ``.pth``).
    """
    import site

    site_dirs = [p for p in site.getsitepackages() if os.path.isdir(p)]
    channel_in, channel_out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # the solution's prints go to the test log, not into the channel
    import_dirs = [p for p in roots.split(os.pathsep) if p] or [app_dir]
    reads = list(_READ_DIRS) + [p for p in sys.path if os.path.isdir(p)] + site_dirs + [app_dir, *import_dirs,
                                                                                          "/dev/urandom"]
    why = confine(reads, [scratch, "/dev/null"])
    if why:  # fail closed: unconfined, the solution could read the hidden tests or write the reward
        print(f"swerl_solution_proxy: {why}; the solution is not run unconfined", file=sys.stderr)
        _send(channel_out, {"error": f"the solution was not imported: {why} (it would run unconfined)"})
        return
    source_only_imports()
    sys.path[:0] = import_dirs
    sys.path += [p for p in site_dirs if p not in sys.path]
    try:
        __import__(module)
        solution = sys.modules[module]
    except BaseException as err:  # noqa: BLE001 - SystemExit and skips too: the import failed
        _send(channel_out, {"error": f"importing {module} failed: {_error_line(err)}"})
        return
    _send(channel_out, {"ready": True})
    instances = []
    while True:
        try:
            request = _receive(channel_in)
        except EOFError:
            return
        name = request.get("new", request.get("call"))
        try:
            args, kwargs = decode(request["args"]), decode(request["kwargs"])
            if "new" in request:
                instances.append(getattr(solution, name)(*args, **kwargs))
                reply = {"handle": len(instances) - 1}
            else:
                owner = solution if request.get("handle") is None else instances[request["handle"]]
                reply = {"result": encode(getattr(owner, name)(*args, **kwargs))}
        except BaseException as err:  # noqa: BLE001 - a SystemExit in the solution is its error too
            reply = {"error": f"{name}() raised {_error_line(err)}", "type": _builtin_name(err),
                     "base": _builtin_base(err)}
        _send(channel_out, reply)


def _builtin_base(err: BaseException):
    """The name of the first class of ``type(err).__mro__`` that is exactly a builtin exception."""
    import builtins

    return next((cls.__name__ for cls in type(err).__mro__ if getattr(builtins, cls.__name__, None) is cls), None)


def _builtin_name(err: BaseException):
    """The name of ``err``'s type when that type is exactly a builtin exception, else None."""
    import builtins

    name = type(err).__name__
    return name if getattr(builtins, name, None) is type(err) else None


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    serve(*sys.argv[2:6])
