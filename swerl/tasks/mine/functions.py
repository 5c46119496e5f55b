"""The functions and methods of one Python source file, their bodies, and the stub that replaces one.

A site is a module-level function or a method of a module-level class (classes nested in classes
included); functions nested in functions are part of their outer function's body. Its body runs
from the first statement after the docstring to the end of the last statement.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

STUB = "raise NotImplementedError"
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Site:
    """One function or method of a source file; lines are 1-based, ``end_line`` inclusive."""

    path: str  # relative to the project root, '/'-separated
    qualname: str  # 'Class.method' or 'function'
    first_line: int  # the code object's co_firstlineno: the first decorator's line, else the def line
    def_line: int
    body_line: int  # first line of the body after the docstring; 0 when the body is only a docstring
    body_col: int
    end_line: int
    body_text: str  # the body's source lines after the docstring, as written
    statements: int
    trivial: str  # why the body is trivial ('' when it is not)


def sites(path: str, source: str) -> list[Site]:
    """Every function and method of ``source`` (the text of ``path``), in file order.

    Raises:
        SyntaxError: the source does not parse.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found: list[Site] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(_site(path, lines, node, prefix + node.name))

    walk(tree.body, "")
    return found


def _site(path: str, lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str) -> Site:
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    body = node.body[1:] if _docstring(node) else node.body
    if not body:
        return Site(path, qualname, first, node.lineno, 0, 0, node.end_lineno or node.lineno, "", 0,
                    "the body is only a docstring")
    start, end = body[0].lineno, body[-1].end_lineno or body[-1].lineno
    text = "".join(lines[start - 1:end])
    on_def_line = bool(lines[start - 1][: body[0].col_offset].strip())  # `def f(): return x`, `"""doc"""; x`
    return Site(path, qualname, first, node.lineno, start, body[0].col_offset, end, text, len(body),
                _trivial(body, on_def_line))


def _docstring(node: ast.AST) -> bool:
    first = node.body[0] if node.body else None
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def _trivial(body: list[ast.stmt], on_def_line: bool) -> str:
    """Why this body is not worth a task: written on the def line, a pass, a constant expression, a
    lone raise, or one return of a constant (or of nothing); '' otherwise."""
    if on_def_line:
        return "the body is on the def line"
    if len(body) > 1:
        return ""
    only = body[0]
    if isinstance(only, ast.Pass):
        return "the body is a pass"
    if isinstance(only, ast.Expr) and isinstance(only.value, ast.Constant):
        return "the body is a constant expression"
    if isinstance(only, ast.Raise):
        return "the body only raises"
    if isinstance(only, ast.Return) and (only.value is None or is_literal(only.value)):
        return "the body returns a constant"
    return ""


def is_literal(node: ast.expr) -> bool:
    """Whether ``node`` is a literal (``ast.literal_eval`` can evaluate it)."""
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def stubbed(source: str, site: Site) -> str:
    """``source`` with the body of ``site`` (after its docstring) replaced by ``raise NotImplementedError``;
    the signature, decorators and docstring stay as written."""
    lines = source.splitlines(keepends=True)
    indent = lines[site.body_line - 1][: site.body_col]
    newline = "\r\n" if lines[site.body_line - 1].endswith("\r\n") else "\n"
    return "".join(lines[: site.body_line - 1] + [f"{indent}{STUB}{newline}"] + lines[site.end_line:])


def normalised(text: str) -> str:
    """``text`` without any whitespace: a copy of a body is found however it was re-indented or wrapped."""
    return _SPACE.sub("", text)
