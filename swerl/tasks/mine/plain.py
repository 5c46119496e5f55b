"""Whether a covering test is plain-value: it only calls the mined function with literal arguments
and compares what comes back with literals, so it can judge through the isolated harness.

A test function (module level, ``def test_x(...)``) is plain-value when, by construction:

- its decorators are only ``@pytest.mark.parametrize(NAMES, VALUES)`` with literal names and values
  (``pytest`` bound by ``import pytest``), and its parameters are exactly the parametrized names
  (no fixture);
- its body, after an optional docstring, is statements of these forms only, at least one call in all:
  ``assert CALL == V`` (or ``!=``, either side), ``assert CALL is [not] None/True/False``,
  ``assert CALL``, ``assert not CALL`` (each with an optional literal message), and
  ``with pytest.raises(E): CALL`` with ``E`` a builtin exception class;
- ``CALL`` is the mined function called with values ``V`` (a literal for :func:`ast.literal_eval`
  or a parametrized name), bound as ``from MODULE import f [as g]`` or reached as ``mod.f`` after
  ``import MODULE [as mod]``, where ``MODULE`` is the function's module or a package above it;
- the file's module level holds only imports, definitions, a docstring and assignments of literals,
  each name bound once (no code that changes the module under test before the tests run).

Anything else (a fixture, a helper, another project name, a method) is not plain-value, with the
first rule it breaks as the reason. Functions only: a method needs an instance made by a call the
harness would have to trust.
"""

from __future__ import annotations

import ast
import builtins
import copy
from dataclasses import dataclass

from swerl.tasks.mine.functions import is_literal

PYTEST = ("import", "pytest")
# Module-level functions pytest runs around a file's tests (xunit and nose style).
XUNIT_HOOKS = frozenset({"setup_module", "teardown_module", "setup_function", "teardown_function", "setUpModule",
                         "tearDownModule", "setup", "teardown"})
RESERVED = frozenset({"pytest", "builtins", "contextlib", "SolutionError", "solution_function", "_raises"})


@dataclass(frozen=True)
class Target:
    """The mined function as the tests reach it: its name and the module that defines it (dotted)."""

    name: str
    module: str


@dataclass(frozen=True)
class PlainTest:
    """A plain-value test, rewritten to call :func:`binding_name` (the proxy's stand-in) and ``_raises``."""

    func: ast.FunctionDef

    def source(self, name: str | None = None) -> str:
        """The rewritten ``def`` with its decorators, as Python source (renamed ``name`` if given)."""
        func = copy.copy(self.func)
        func.name = name or func.name
        return ast.unparse(ast.fix_missing_locations(func))


def site_module(path: str, roots: list[str]) -> str | None:
    """The dotted module of the library file ``path`` (relative, '/'-separated) under the first import
    root that holds it (``'.'`` = the project root); None when no root does or a part is no identifier."""
    for root in roots:
        prefix = "" if root == "." else root.rstrip("/") + "/"
        if path.startswith(prefix) and path.endswith(".py"):
            parts = path[len(prefix):-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts and all(p.isidentifier() for p in parts):
                return ".".join(parts)
    return None


def binding_name(target: Target) -> str:
    """The name the hidden test file binds the proxy's stand-in to: the function's own, unless that
    is a builtin, a name the file needs itself, or one pytest would collect as a test."""
    clash = target.name in RESERVED or hasattr(builtins, target.name) or target.name.startswith("test")
    return f"_mined_{target.name}" if clash else target.name


def module_problem(source: str) -> str:
    """Why the module level of a test file or ``conftest.py`` is not plain (see the module docstring:
    hooks, autouse fixtures, ``pytest_plugins`` and module-level code count too), '' when it is."""
    try:
        return _module_names(ast.parse(source))[1]
    except (SyntaxError, ValueError):
        return "it does not parse"


def plain_test(source: str, test_name: str, target: Target) -> PlainTest | str:
    """The module-level test ``test_name`` of the test file ``source``, rewritten for the isolated
    harness, or why it is not plain-value (one line)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return "the test file does not parse"
    imports, why = _module_names(tree)
    if why:
        return why
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == test_name]
    if len(defs) != 1 or not isinstance(defs[0], ast.FunctionDef):
        return f"{test_name} is not one plain module-level def (a class method, async or redefined)"
    return _rewrite(defs[0], imports, target)


Binding = tuple[str, str]  # ('import', 'pkg.mod'), ('from', 'pkg.mod.attr'), or ('', '') for a def or literal


def _module_names(tree: ast.Module) -> tuple[dict[str, Binding], str]:
    """``({name: binding}, why not)``: what each name bound at module level is (``('import', 'a.b')``
    for ``import a.b as x``, ``('import', 'a')`` for ``import a.b``, ``('from', 'm.f')`` for
    ``from m import f``); why the module level is not plain, '' when it is."""
    bound: dict[str, Binding] = {}
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.Import):
            pairs = [(a.asname or a.name.split(".")[0], ("import", a.name if a.asname else a.name.split(".")[0]))
                     for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level or not node.module or any(a.name == "*" for a in node.names):
                return bound, "the test file has a relative or star import"
            pairs = [(a.asname or a.name, ("from", f"{node.module}.{a.name}")) for a in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name.startswith("pytest_") or node.name in XUNIT_HOOKS or any(
                    "autouse" in ast.unparse(d) for d in node.decorator_list):
                return bound, f"{node.name} is a hook or autouse fixture that runs around the tests"
            pairs = [(node.name, ("", ""))]
        elif isinstance(node, ast.Assign) and is_literal(node.value) and all(isinstance(t, ast.Name) for t in node.targets):
            pairs = [(t.id, ("", "")) for t in node.targets]  # type: ignore[attr-defined]
            if any(name.startswith("pytest") for name, _ in pairs):  # pytest_plugins, pytestmark
                return bound, f"the test file sets {pairs[0][0]}"
        elif i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        else:
            return bound, f"the test file runs code at module level (line {node.lineno})"
        for name, what in pairs:
            if name in bound:
                return bound, f"the test file binds {name} twice at module level"
            bound[name] = what
    return bound, ""


def _rewrite(func: ast.FunctionDef, imports: dict[str, Binding], target: Target) -> PlainTest | str:
    params, why = _parametrized(func, imports)
    if why:
        return why
    args = func.args
    if args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg or args.defaults or \
            {a.arg for a in args.args} != params:
        return f"{func.name} takes a fixture (its parameters are not exactly the parametrized names)"
    if binding_name(target) in params:
        return f"{func.name} has a parameter named {binding_name(target)}"
    rewriter = _Body(imports, params, target)
    body = func.body[1:] if func.body and isinstance(func.body[0], ast.Expr) and isinstance(
        func.body[0].value, ast.Constant) and isinstance(func.body[0].value.value, str) else func.body
    new_body = []
    for stmt in body:
        new = rewriter.statement(stmt)
        if isinstance(new, str):
            return f"{func.name} line {stmt.lineno}: {new}"
        new_body.append(new)
    if not rewriter.calls:
        return f"{func.name} never calls {target.name}"
    rewritten = copy.copy(func)
    rewritten.body, rewritten.returns, rewritten.type_comment = new_body, None, None
    return PlainTest(rewritten)


def _parametrized(func: ast.FunctionDef, imports: dict[str, Binding]) -> tuple[set[str], str]:
    """The names the decorators parametrize, or why a decorator is not a plain parametrize."""
    names: set[str] = set()
    for dec in func.decorator_list:
        ok = (isinstance(dec, ast.Call) and ast.unparse(dec.func) == "pytest.mark.parametrize" and imports.get("pytest") == PYTEST
              and len(dec.args) == 2 and not dec.keywords and all(is_literal(a) for a in dec.args))
        if not ok:
            return names, f"{func.name} has a decorator other than a literal pytest.mark.parametrize"
        spec = ast.literal_eval(dec.args[0])
        listed = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
        if not all(isinstance(s, str) and s.isidentifier() for s in listed) or names & set(listed):
            return names, f"{func.name} parametrizes names that are not plain identifiers"
        names |= set(listed)
    return names, ""


class _Body:
    """Checks and rewrites the statements of one test body; counts the calls of the target."""

    def __init__(self, imports: dict[str, Binding], params: set[str], target: Target) -> None:
        self.imports, self.params, self.target = imports, params, target
        self.binding = binding_name(target)
        self.calls = 0

    def statement(self, stmt: ast.stmt) -> ast.stmt | str:
        """``stmt`` rewritten, or why it is not one of the plain forms."""
        if isinstance(stmt, ast.Assert):
            if stmt.msg is not None and not is_literal(stmt.msg):
                return "an assert message that is not a literal"
            test = self.check(stmt.test)
            return test if isinstance(test, str) else ast.Assert(test=test, msg=stmt.msg)
        if isinstance(stmt, ast.With):
            return self.raises(stmt)
        return f"`{ast.unparse(stmt).splitlines()[0][:60]}` (only assert and with pytest.raises are plain)"

    def check(self, test: ast.expr) -> ast.expr | str:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.call(test.operand)
            return inner if isinstance(inner, str) else ast.UnaryOp(op=ast.Not(), operand=inner)
        if isinstance(test, ast.Compare):
            if len(test.ops) != 1:
                return "a chained comparison"
            op, left, right = test.ops[0], test.left, test.comparators[0]
            if isinstance(op, (ast.Is, ast.IsNot)):
                if not (isinstance(right, ast.Constant) and right.value in (None, True, False)
                        and type(right.value) in (type(None), bool)):
                    return "an `is` comparison with something other than None, True or False"
                new = self.call(left)
                return new if isinstance(new, str) else ast.Compare(left=new, ops=[op], comparators=[right])
            if not isinstance(op, (ast.Eq, ast.NotEq)):
                return f"a {type(op).__name__} comparison (only ==, != and is are plain)"
            call_left = self._is_target_call(left)
            new = self.call(left if call_left else right)
            other = right if call_left else left
            if isinstance(new, str):
                return new
            if not self.value(other):
                return "a comparison with something other than a literal or a parametrized name"
            return ast.Compare(left=new, ops=[op], comparators=[other]) if call_left else \
                ast.Compare(left=other, ops=[op], comparators=[new])
        return self.call(test)

    def raises(self, stmt: ast.With) -> ast.stmt | str:
        if len(stmt.items) != 1 or stmt.items[0].optional_vars is not None or len(stmt.body) != 1:
            return "a with statement other than `with pytest.raises(E):` around one call"
        ctx, only = stmt.items[0].context_expr, stmt.body[0]
        if not (isinstance(ctx, ast.Call) and ast.unparse(ctx.func) == "pytest.raises" and self.imports.get("pytest") == PYTEST
                and len(ctx.args) == 1 and not ctx.keywords and isinstance(ctx.args[0], ast.Name)):
            return "a with statement other than `with pytest.raises(E):` (no match=, one exception class)"
        name = ctx.args[0].id
        exc = getattr(builtins, name, None)
        if name in self.imports or name in self.params or not (isinstance(exc, type) and issubclass(exc, BaseException)):
            return f"pytest.raises({name}): not a builtin exception class"
        if not isinstance(only, ast.Expr):
            return "a pytest.raises block whose body is not one call"
        call = self.call(only.value)
        if isinstance(call, str):
            return call
        return ast.With(items=[ast.withitem(context_expr=ast.Call(func=ast.Name("_raises", ast.Load()),
                                                                  args=[ast.Name(name, ast.Load())], keywords=[]))],
                        body=[ast.Expr(call)], type_comment=None)

    def call(self, node: ast.expr) -> ast.expr | str:
        """``node`` as a call of the binding, or why it is not a call of the target with plain values."""
        if not self._is_target_call(node):
            return f"an expression other than a call of {self.target.name} ({ast.unparse(node)[:60]})"
        assert isinstance(node, ast.Call)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return "a call with *args or **kwargs"
        if not all(self.value(a) for a in [*node.args, *(k.value for k in node.keywords)]):
            return f"a call of {self.target.name} with an argument that is not a literal or a parametrized name"
        self.calls += 1
        return ast.Call(func=ast.Name(self.binding, ast.Load()), args=node.args, keywords=node.keywords)

    def value(self, node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id in self.params) or is_literal(node)

    def _is_target_call(self, node: ast.expr) -> bool:
        if not isinstance(node, ast.Call):
            return False
        module, attr = self._resolve(node.func)
        return attr == self.target.name and (self.target.module == module or self.target.module.startswith(module + "."))

    def _resolve(self, func: ast.expr) -> tuple[str, str]:
        """``(module, attribute)`` that ``func`` names through the module's imports, ``('', '')`` if none."""
        chain: list[str] = []
        while isinstance(func, ast.Attribute):
            chain.insert(0, func.attr)
            func = func.value
        if not isinstance(func, ast.Name) or func.id in self.params:
            return "", ""
        kind, bound = self.imports.get(func.id, ("", ""))
        if not kind or (kind == "import" and not chain):  # a def of the test file; `import m` then `m(...)`
            return "", ""
        module, _, attr = ".".join([bound, *chain]).rpartition(".")
        return module, attr
