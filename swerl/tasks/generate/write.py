"""Turn one rendered template variant into a :class:`~swerl.tasks.pytask.PyTaskSpec`: the
instruction (one of :data:`~swerl.tasks.generate.template.WORDINGS` phrasings, the stub module
shown whole), ``/app/solution.py`` holding the stub, the oracle, and hidden tests that call the
solution only through swerl's confined worker (``isolate_solution``)."""

from __future__ import annotations

from swerl.tasks.generate.template import Rendered, Template, render
from swerl.tasks.pytask import PyTaskSpec

INSTRUCTIONS = (
    """\
# Implement `{what}` in `/app/solution.py`

`/app/solution.py` is a small Python module. The {kind} `{what}` in it has no body yet, only
its signature and docstring. Write the body so that `{what}` does what its docstring says (the
examples show expected results). Keep its signature and the rest of the module as they are.
Use only the Python standard library.

```python
{stub}```
""",
    """\
# Complete `{what}`

Finish the {kind} `{what}` of the module below, which is saved as `/app/solution.py`.
Its docstring says what it must return; the examples are exact. Do not rename anything and
do not change the signature. Only the standard library is available.

```python
{stub}```
""",
    """\
# Write the body of `{what}`

Hidden tests call the {kind} `{what}` of `/app/solution.py` and compare its results with the
ones its docstring describes, including edge cases. Here is the file; the body of `{what}` is
missing (it ends at its docstring):

```python
{stub}```

Write the missing body. Keep the signature and the other definitions unchanged.
""",
)

TEST_PRELUDE = '''\
import math

import pytest
from swerl_solution_proxy import SolutionError


def _same(got, want):
    """got == want with the same types all the way down (floats within 1e-9)."""
    if type(got) is not type(want):
        return False
    if type(want) is float:
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    if type(want) in (list, tuple):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    if type(want) is dict:
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    return got == want


def _check(call, *args, want):
    got = call(*args)
    assert _same(got, want), f"got {got!r}, want {want!r}"


def _check_raises(name, call, *args):
    with pytest.raises(SolutionError) as info:
        call(*args)
    assert info.value.exc_type == name, f"raised {info.value.exc_type or 'a non-builtin error'}, want {name}"
'''


def _call_line(call: str, args: tuple, result: tuple) -> str:
    status, value = result
    arg_text = "".join(f", {a!r}" for a in args)
    if status == "raise":
        return f"_check_raises({value!r}, {call}{arg_text})"
    return f"_check({call}{arg_text}, want={value!r})"


def test_code(kind: str, entry: str, rendered: Rendered) -> str:
    """The hidden tests after the proxy header: one test function per case."""
    tests = []
    for i, (case, result) in enumerate(zip(rendered.cases, rendered.expected)):
        if kind == "function":
            lines = [_call_line(entry, case, result)]
        else:
            init, steps = case
            lines = [f"obj = {entry}({', '.join(repr(a) for a in init)})"]
            lines += [_call_line(f"obj.{method}", args, r) for (method, args), r in zip(steps, result)]
        tests.append(f"def test_case_{i:02d}():\n" + "".join(f"    {line}\n" for line in lines))
    return TEST_PRELUDE + "\n\n" + "\n\n".join(tests)


def instruction(template: Template, rendered: Rendered, wording: int) -> str:
    """The prompt: one of the phrasings, naming the target and showing the whole stub module."""
    if template.kind == "class":
        what, kind = f"{rendered.owner}.{rendered.target}", "method"
    else:
        what, kind = rendered.target, "function"
    return INSTRUCTIONS[wording].format(what=what, kind=kind, stub=rendered.stub)


def task_spec(name: str, template: Template, variant: int, metadata: dict[str, str]) -> PyTaskSpec:
    """The task of variant ``variant`` of ``template``, named ``name``."""
    rendered = render(template, variant)
    return PyTaskSpec(
        name=name,
        instruction=instruction(template, rendered, template.params(variant)["wording"]),
        entry_point=rendered.entry,
        entry_kind=template.kind,
        solution_code=rendered.oracle,
        app_files={"solution.py": rendered.stub},
        test_code=test_code(template.kind, rendered.entry, rendered),
        title=name,
        metadata=metadata,
        agent_timeout_s=900.0,
        verifier_timeout_s=120.0,
        memory_mb=1024,
        cpus=1.0,
        isolate_solution=True,
        num_tests=len(rendered.cases),
    )
