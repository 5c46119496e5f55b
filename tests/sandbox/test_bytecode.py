"""No bytecode of the agent's reaches the judge, on the real engine: on a task whose tests import
the solution in the judging process, a correct solution compiled in the container to an
unchecked hash-based pyc (PEP 552, imported without its source being read) beside a bland source,
or left as a sourceless ``solution.pyc``, scores 0 in the clean room (dropped at the copy-out and
counted) and in the same container (the judge reads bytecode only from an empty prefix and has no
sourceless loader). The oracle still scores 1."""

from __future__ import annotations

import asyncio

import pytest

from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.tasks import load_task
from swerl.tasks.pytask import PyTaskSpec, write_pytask

from ._support import run

pytestmark = pytest.mark.docker

GOOD = "def add(a, b):\n    return a + b\n"
COMPILE = (  # the correct solution as an unchecked pyc at the path given as argv[1]
    "import py_compile, sys; open('/tmp/good.py', 'w').write(sys.argv[2]); "
    "py_compile.compile('/tmp/good.py', cfile=sys.argv[1], doraise=True, "
    "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)"
)
ATTEMPTS = {
    "beside-source": "mkdir -p /app/__pycache__ && python3 -c \"$0\" \"$(python3 -c "
                     "'import importlib.util as u; print(u.cache_from_source(\"/app/solution.py\"))')\" \"$1\" "
                     "&& printf 'def add(a, b):\\n    return 0\\n' > /app/solution.py",
    "sourceless": "python3 -c \"$0\" /app/solution.pyc \"$1\"",
}


@pytest.fixture(scope="module")
def in_process_task(tmp_path_factory):
    spec = PyTaskSpec(name="add", instruction="Write add(a, b) in /app/solution.py.", entry_point="add",
                      title="add", solution_code=GOOD, test_code="def test_add():\n    assert add(2, 3) == 5\n")
    return load_task(write_pytask(spec, tmp_path_factory.mktemp("inproc") / "add"))


async def _attempt(mgr: SandboxManager, task, script: str):
    async with mgr.sandbox(task) as sb:
        planted = await sb.exec(f"bash -c {_quote(script)} {_quote(COMPILE)} {_quote(GOOD)}", timeout_s=60)
        assert planted.exit_code == 0, planted.output
        return await sb.verify()


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


@pytest.mark.parametrize("verification", ["clean_room", "same_container"])
def test_planted_bytecode_is_not_imported_by_the_judge(in_process_task, verification):
    async def trials():
        async with SandboxManager(SandboxConfig(concurrency=3, verification=verification, warm_pool=False)) as mgr:
            return await asyncio.gather(mgr.run_oracle(in_process_task),
                                        *(_attempt(mgr, in_process_task, s) for s in ATTEMPTS.values()))

    oracle, *verdicts = run(trials())
    assert oracle.reward == 1.0, oracle
    for name, verdict in zip(ATTEMPTS, verdicts):
        assert verdict.verification == verification
        assert verdict.reward == 0.0, (name, verdict)
        if verification == "clean_room":
            assert verdict.work_product_dropped.get("bytecode", 0) >= 1, (name, verdict.work_product_dropped)
