"""One pymethods template: a small module with one unwritten function (or method), its variant
axes, and the inputs its hidden tests and docstring examples call it with.

A template's ``source`` is a Python module in :class:`string.Template` syntax (``${fn}``: a
variant axis; ``${examples}``: the docstring examples, computed from the oracle). The target's
body sits between the marker lines ``# <solution>`` and ``# </solution>``: the oracle keeps it,
the stub given to the agent leaves it out (the target ends at its docstring, the shape of a
HumanEval prompt, which a small model continues with a body; a stub that raised
``NotImplementedError`` was copied back verbatim). Tier-1 modules hold the target alone: with a
neighbouring function before it, SmolLM2-135M mostly copied the neighbour and dropped the target
(0 of 18 measured episodes passed, see ``docs/tasks.md``). Expected results are
computed by running the oracle (trusted code of this package) at generation time, so a template
states inputs, never hand-copied outputs.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

# A call of a function template: the positional arguments. A scenario of a class template:
# (constructor arguments, [(method, arguments), ...]) run on one instance.
Args = tuple
Scenario = tuple[tuple, list[tuple[str, tuple]]]
Outcome = tuple[str, Any]  # ("ok", value) or ("raise", builtin exception name)

_BLOCK = re.compile(r"^([ \t]*)# <solution>\n(.*?)^[ \t]*# </solution>\n", re.DOTALL | re.MULTILINE)
_EXAMPLES = re.compile(r"^([ \t]*)\$\{examples\}\n", re.MULTILINE)
WORDINGS = 3  # instruction phrasings, a variant axis of every template (see swerl.tasks.generate.write)


@dataclass(frozen=True)
class Template:
    """A family of tasks that differ only in their variant axes.

    Attributes:
        name: unique across the catalogue, lowercase words joined by '-' (goes into task names).
        family: strings, lists, dicts, arithmetic, classes or parsing.
        tier: 1 one-liner, 2 a few lines or a loop with an edge case, 3 state or parsing.
        axes: variant axis -> its values; a variant is one value per axis (plus a wording).
        source: the module (see the module docstring).
        target: the function or method the agent writes, e.g. "${fn}".
        entry: what the hidden tests bind: the function, or the class of a method target.
        examples: params -> the docstring's example calls (function) or one scenario (class).
        cases: (rng, params) -> the hidden tests' calls or scenarios, edge cases included.
        entry: for a method target, its class (the tests bind it); else the target.
        kind: "function", or "class" for a method target.
        owner: the class of a method target, named in the instruction.
        derive: params -> further placeholders computed from the axes (e.g. code for a word).
    """

    name: str
    family: str
    tier: int
    axes: dict[str, tuple]
    source: str
    target: str
    examples: Callable[[dict], list]
    cases: Callable[[random.Random, dict], list]
    entry: str = ""
    kind: Literal["function", "class"] = "function"
    owner: str = ""
    derive: Callable[[dict], dict] = field(default=lambda params: {}, repr=False)

    @property
    def shows_context(self) -> bool:
        """Whether the module keeps the definitions before the target (tiers 2 and 3)."""
        return self.tier >= 2 or self.kind == "class"

    @property
    def size(self) -> int:
        """Distinct variants: the product of the axes' sizes times the wordings."""
        return math.prod(len(v) for v in self.axes.values()) * WORDINGS

    def params(self, variant: int) -> dict:
        """The axis values of variant number ``variant`` (0 <= variant < size), plus ``wording``.

        Raises:
            IndexError: ``variant`` is out of range.
        """
        if not 0 <= variant < self.size:
            raise IndexError(f"template {self.name}: variant {variant} not in [0, {self.size})")
        values, rest = {}, variant
        for axis, choices in self.axes.items():
            rest, i = divmod(rest, len(choices))
            values[axis] = choices[i]
        values["wording"] = rest
        return values


@dataclass(frozen=True)
class Rendered:
    """One variant made concrete: the texts a task folder is written from."""

    target: str
    entry: str
    owner: str
    stub: str
    oracle: str
    cases: list
    expected: list


def _fill(text: str, params: dict) -> str:
    return string.Template(text).substitute(params)


def _doctest_lines(kind: str, entry: str, examples: list, namespace: dict) -> list[str]:
    """Docstring example lines: each call with its oracle result (None results show nothing)."""
    lines = []
    if kind == "function":
        for args in examples:
            lines.append(f">>> {entry}({_args(args)})")
            lines.append(repr(namespace[entry](*args)))
        return lines
    for init, steps in examples:
        var = entry.lower()
        obj = namespace[entry](*init)
        lines.append(f">>> {var} = {entry}({_args(init)})")
        for method, args in steps:
            lines.append(f">>> {var}.{method}({_args(args)})")
            result = getattr(obj, method)(*args)
            if result is not None:
                lines.append(repr(result))
    return lines


def _args(args: tuple) -> str:
    return ", ".join(repr(a) for a in args)


def outcome(call: Callable[[], Any]) -> Outcome:
    """("ok", result) or ("raise", name of the builtin exception the call raised)."""
    try:
        return "ok", call()
    except Exception as err:  # noqa: BLE001 - the oracle's raise is an expected result
        return "raise", type(err).__name__


def expected_results(kind: str, entry: str, cases: list, namespace: dict) -> list:
    """Per case, the oracle's outcome (function) or the outcomes of its steps (class)."""
    if kind == "function":
        return [outcome(lambda a=args: namespace[entry](*a)) for args in cases]
    results = []
    for init, steps in cases:
        obj = namespace[entry](*init)
        results.append([outcome(lambda m=method, a=args: getattr(obj, m)(*a)) for method, args in steps])
    return results


def render(template: Template, variant: int) -> Rendered:
    """The stub, oracle, hidden-test inputs and expected outcomes of one variant.

    Inputs come from a generator seeded with the template name and variant number only, so a
    task's content does not depend on the seed that chose it.

    Raises:
        ValueError: the template is inconsistent (no solution block, an unknown placeholder).
    """
    params = template.params(variant)
    filled = {k: v for k, v in params.items() if k != "wording"}
    filled.update(template.derive(filled))
    entry = _fill(template.entry or template.target, filled)
    body = _fill(template.source, {**filled, "examples": "${examples}"})
    block = _BLOCK.search(body)
    if block is None:
        raise ValueError(f"template {template.name}: no '# <solution>' ... '# </solution>' block")
    if not template.shows_context:
        start = re.search(rf"^def {re.escape(entry)}\(", body, re.MULTILINE)
        if start is None:
            raise ValueError(f"template {template.name}: no top-level 'def {entry}(' in its source")
        body = body[start.start():]
    oracle_no_examples = _BLOCK.sub(lambda m: m.group(2), body)
    namespace: dict = {}
    exec(compile(_EXAMPLES.sub("", oracle_no_examples), f"<template {template.name}>", "exec"), namespace)  # noqa: S102 - our own template code
    docs = _doctest_lines(template.kind, entry, template.examples(filled), namespace)

    def with_examples(text: str) -> str:
        return _EXAMPLES.sub(lambda m: "".join(f"{m.group(1)}{line}\n" for line in docs), text)

    stub = with_examples(_BLOCK.sub("", body))
    oracle = with_examples(oracle_no_examples)
    cases = template.cases(random.Random(f"{template.name}/{variant}"), filled)
    return Rendered(target=_fill(template.target, filled), entry=entry, owner=_fill(template.owner, filled),
                    stub=stub, oracle=oracle, cases=cases,
                    expected=expected_results(template.kind, entry, cases, namespace))


def variant_count(templates: list[Template]) -> int:
    """Distinct tasks the templates can make."""
    return sum(t.size for t in templates)


def axis_product(**axes: tuple) -> list[dict]:
    """Every combination of the axes (helper for templates that tie two axes together)."""
    keys = list(axes)
    return [dict(zip(keys, combo)) for combo in itertools.product(*axes.values())]
