"""What of a container can reach the task's verifier as it runs, derived from how that verifier
runs: a change or a text is a tamper reason only when it can reach the verifier (or names its
output, inputs or start-up hooks outright; see :mod:`~swerl.sandbox.tamper.text`).

Every process of the agent is killed before verification starts, so nothing the agent ran can
act on the verifier: only files it left can, and only those the verifier reads. How it reads them
is known for swerl's own verifier (``tests/test.sh`` execs ``tests/swerl_run_tests.py``, see
:mod:`swerl.tasks.harness`): ``python3 -I -S`` (no ``.pth`` file, ``sitecustomize`` or user site
is read), pytest with ``-c /tests/pytest.ini --rootdir /tests --noconftest`` and plugin autoload
off (no ``conftest.py``, ``pytest.ini`` or pytest section outside ``/tests`` is read), a clean
``PATH``, and of the work product only the modules the hidden tests import (the entry modules) and
what those import in turn. Any other verifier is taken to read pytest configuration anywhere and to
run any file of the work product.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from swerl.sandbox.tamper.inprocess import is_namesake, rebound_names, stdlib_bindings

if TYPE_CHECKING:
    from swerl.tasks.task_folder import Task

RUNNER = "swerl_run_tests.py"
PROXY = "swerl_solution_proxy.py"  # beside the tests of an isolated task: the solution runs in a confined worker
PROXY_CALLS = ("solution_function", "solution_class")  # swerl's proxy: each names the module it runs
# Names that load code a static read of imports cannot follow: a module that uses one may run any
# file of the work product.
DYNAMIC_LOADERS = frozenset({
    "__import__", "import_module", "exec", "eval", "compile", "runpy", "run_path", "run_module",
    "spec_from_file_location", "SourceFileLoader", "SourcelessFileLoader", "load_module", "exec_module",
    "execfile", "path_hooks", "meta_path", "zipimport", "__builtins__", "builtins", "__subclasses__", "marshal",
    "FunctionType", "CodeType", "ctypes", "cffi",
    # ... or names a module by a string, or widens where a package's submodules are found
    "pkgutil", "resolve_name", "find_spec", "module_from_spec", "__path__", "__spec__", "__loader__",
    # ... or runs a program (which may be any file of the work product) while the tests run
    "subprocess", "system", "popen", "Popen", "multiprocessing", "pty", "posix_spawn", "posix_spawnp",
    "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
    "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
})


@dataclass(frozen=True)
class VerifierReach:
    """How the task's verifier reads the container.

    Attributes:
        pinned_pytest: swerl's runner (``python3 -I -S``, ``--noconftest``, the ini and rootdir
            pinned to ``/tests``): pytest configuration outside ``/tests`` is never read.
        entry_modules: dotted modules the hidden tests import (``solution``, ``pkg.sub``); None when
            unknown (any verifier but swerl's, or tests whose imports cannot be read), then every
            file of the work product counts as run.
        import_roots: the folders the tests import from: ``pythonpath`` of the pinned
            ``/tests/pytest.ini`` (``/app/src`` for a src layout); None: the work product's folders.
        in_process: swerl's runner imports the work product into pytest's own interpreter (no
            ``swerl_solution_proxy.py`` beside the tests: mined repository tasks); the modules it
            imports are then held to the stricter in-process rules of
            :func:`~swerl.sandbox.tamper.text.in_process_reasons`.
    """

    pinned_pytest: bool = False
    entry_modules: frozenset[str] | None = None
    import_roots: tuple[str, ...] | None = None
    in_process: bool = False
    image_files: Path | None = None

    def image_text(self, path: str) -> str | None:
        """The text the task's image holds at ``path`` (its build context, ``environment/``, mirrors
        the container's paths: ``environment/app/x.py`` is ``/app/x.py``), None when unknown."""
        if self.image_files is None:
            return None
        try:
            return (self.image_files / path.lstrip("/")).read_text(encoding="utf-8", errors="replace")
        except (OSError, ValueError):
            return None

    @classmethod
    def of(cls, task: Task | None) -> VerifierReach:
        """The reach of ``task``'s verifier (the widest when ``task`` is None or not swerl's)."""
        if task is None or task.tests_in_verifier_image:
            return cls()
        tests = task.tests_dir
        script = tests / "test.sh"
        try:
            text = script.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return cls()
        if not (tests / RUNNER).is_file() or f"/tests/{RUNNER}" not in text or "python3 -I -S" not in text:
            return cls()
        sources = [path.read_text(encoding="utf-8", errors="replace") for path in sorted(tests.rglob("*.py"))
                   if not path.name.startswith("swerl_")]  # a project's tests keep their folders (mined tasks)
        entry = imported_modules(sources) if sources else None
        return cls(pinned_pytest=True, entry_modules=entry or None, import_roots=ini_pythonpath(tests / "pytest.ini"),
                   in_process=not (tests / PROXY).is_file(), image_files=task.environment_dir)

    def reads_pytest_config(self, path: str) -> bool:
        """Whether a pytest configuration file at ``path`` can be read by the verifier."""
        return not self.pinned_pytest or path == "/tests" or path.startswith("/tests/")


def ini_pythonpath(ini: Path) -> tuple[str, ...] | None:
    """The absolute folders of ``pythonpath`` in the pytest ini file ``ini`` (pytest >= 7 puts them
    first on ``sys.path``); None when the file or the key is missing or names a relative folder."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(ini.read_text(encoding="utf-8", errors="replace"))
        value = parser.get("pytest", "pythonpath", fallback="")
    except (OSError, configparser.Error):
        return None
    roots = tuple(r.rstrip("/") for r in value.split())
    return roots if roots and all(r.startswith("/") for r in roots) else None


def imported_modules(sources: Iterable[str]) -> frozenset[str] | None:
    """Dotted module names the test ``sources`` import (``pkg.sub`` for ``import pkg.sub`` and
    ``from pkg import sub``: a name that is not a module is simply never found), so that
    :func:`import_closure` reaches a submodule a package's ``__init__`` does not import;
    ``solution_function(name, dir, module)`` and ``solution_class(...)`` calls of swerl's proxy
    count for their module, ``solution`` by default. None when one does not parse."""
    names: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")}
            elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(PROXY_CALLS):
                module = node.args[2] if len(node.args) > 2 else next(
                    (k.value for k in node.keywords if k.arg == "module"), None)
                names.add(module.value if isinstance(module, ast.Constant) and isinstance(module.value, str) else "solution")
    return frozenset(names)


def import_closure(sources: Mapping[str, str], roots: Iterable[str], entry: Iterable[str]) -> set[str] | None:
    """The ``.py`` files of ``sources`` that importing the ``entry`` modules runs, following static
    imports (absolute and relative) between them; None when one of them loads code dynamically
    (:data:`DYNAMIC_LOADERS`), so any file may run.

    Args:
        sources: ``{absolute path: text}`` of the work product's ``.py`` files read.
        roots: the folders on the import path (the declared work product, e.g. ``["/app"]``).
        entry: the top-level modules imported first.
    """
    modules: dict[str, list[str]] = {}  # every file that can supply a name: a package and a module beside it both count
    for path in sources:
        for root in roots:
            if path.startswith(root.rstrip("/") + "/") and path.endswith(".py"):
                parts = path[len(root.rstrip("/")) + 1 : -3].split("/")
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                if parts and all(p.isidentifier() for p in parts):
                    modules.setdefault(".".join(parts), []).append(path)
    reached: set[str] = set()
    pending = [m for m in entry]
    while pending:
        name = pending.pop()
        for prefix in _prefixes(name):  # importing a.b runs a/__init__.py first
            for path in modules.get(prefix, []):
                if path in reached:
                    continue
                reached.add(path)
                imports = _imports(sources[path], prefix, path.endswith("/__init__.py"))
                if imports is None:
                    return None
                pending += imports
    return reached


def _prefixes(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _imports(source: str, module: str, is_package: bool) -> list[str] | None:
    """Modules ``source`` (of ``module``) imports, or None when it loads code dynamically."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None  # read otherwise than Python reads it (a coding line, a cut): anything may run
    package = module if is_package else module.rpartition(".")[0]
    bound, rebound = stdlib_bindings(tree), rebound_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id == "sys":
            return None  # sys.path read or edited: an import may then resolve to any folder of the work product
        if isinstance(node, ast.Name) and node.id in DYNAMIC_LOADERS:
            return None
        if isinstance(node, ast.Attribute) and node.attr in DYNAMIC_LOADERS and not is_namesake(node, bound, rebound):
            return None  # ``re.compile`` is no loader (:func:`~swerl.sandbox.tamper.inprocess.is_namesake`)
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
            if any(alias.name.split(".")[0] in DYNAMIC_LOADERS for alias in node.names):
                return None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, *([base] if base else [])])
            if any(alias.name in DYNAMIC_LOADERS or alias.name == "*" for alias in node.names):
                return None  # a star import runs the submodules its package's __all__ names
            if base:
                found.append(base)
                found += [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
    return found
