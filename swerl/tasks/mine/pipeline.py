"""The steps of ``swerl tasks mine`` that need no sandbox: prepare the project, turn its traced suite
into task folders, and settle the manifest once the tasks are proven.

The caller (``swerl.cli.mine``) runs the suite in a sandbox between :func:`prepare` and
:func:`write_tasks` (:data:`TRACE_COMMAND`, twice), and ``sandbox-test``'s oracle and null trials
between :func:`write_tasks` and :func:`settle`.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swerl.errors import TaskError
from swerl.tasks.mine.candidates import Trace, candidates, library_files, stable_tests, test_files
from swerl.tasks.mine.isolated import harness_plan
from swerl.tasks.mine.manifest import Entry, Manifest, ProjectRun, read_manifest, write_manifest
from swerl.tasks.mine.project import clean, import_roots, project_name, unpack
from swerl.tasks.mine.repository import ProjectText, build_repository
from swerl.tasks.mine.task import MinedTask, write_mined_task

PLUGIN = Path(__file__).resolve().parent / "swerl_trace.py"
TRACE_OUT = "/tmp/swerl_trace.json"
SUITE_TIMEOUT_S = 600.0


@dataclass
class Prepared:
    """A project unpacked and cleaned under a work folder, ready to be traced and mined."""

    source: Path
    root: Path
    name: str
    roots: list[str]
    cleaned: list[str]


def prepare(project: Path, work: Path) -> Prepared:
    """Unpack ``project`` (folder, sdist or wheel) into ``work`` and clean it.

    Raises:
        TaskError: (exit 2) not a folder or known archive, or no test file anywhere in it.
    """
    if not project.exists():
        raise TaskError(f"{project}: no such folder or file; give a project folder, sdist or wheel")
    root = unpack(project, work / "project")
    cleaned = clean(root)
    if not any(p.name.startswith("test") or p.name.endswith("_test.py") for p in root.rglob("*.py")):
        raise TaskError(f"{project}: holds no test file (test*.py or *_test.py); mine a project whose sdist ships its tests")
    return Prepared(project, root, project_name(project), import_roots(root), cleaned)


def trace_command(prepared: Prepared, run: int) -> str:
    """The bash command that runs the suite in ``/app`` with the trace plugin (at ``/swerl_trace``),
    writing ``TRACE_OUT.<run>``; doctests are not collected (their node ids name library files)."""
    roots = ":".join("/app" if r == "." else f"/app/{r}" for r in prepared.roots)
    return (f"cd /app && SWERL_TRACE_ROOT=/app SWERL_TRACE_OUT={TRACE_OUT}.{run} PYTHONPATH=/swerl_trace:{roots} "
            "PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -p swerl_trace -p no:doctest -p no:cacheprovider -q "
            "-o addopts= 2>&1 | tail -5")


def task_name(project: str, path: str, qualname: str, taken: set[str]) -> str:
    """``project-module-qualname`` in lower case (``-2``, ``-3`` ... after a name already taken)."""
    module = re.sub(r"(^|/)(src|__init__)(/|\.py$)", r"\1", path).removesuffix(".py")
    base = re.sub(r"[^a-z0-9]+", "-", f"{project}-{module}-{qualname}".lower()).strip("-")
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name


# Reasons the tamper signal would give an in-process task's oracle, read without a sandbox:
# ``(files {"/app/x.py": text}, import roots, test texts, files the oracle writes) -> reasons``
# (the caller passes the sandbox's rules, ``swerl.sandbox.tamper.scan.static_in_process_reasons``).
Screen = Callable[[dict[str, str], list[str], list[str], list[str]], list[str]]


def write_tasks(prepared: Prepared, runs: list[Trace], out_dir: Path, force: bool = False,
                limit: int | None = None, screen: Screen | None = None) -> tuple[ProjectRun, list[Entry]]:
    """Write a task folder under ``out_dir`` for every candidate that survives the checks that need no
    sandbox (a stable covering test, a body that is not trivial, no copy of it left in code), at most
    ``limit`` of them (in file order; the rest are dropped as ``limit``); returns the project's run
    summary and one manifest entry per function (kept ones are yet to be proven). ``screen``: an
    in-process task whose oracle it flags is dropped before it is written (``oracle flagged by the
    tamper signal``, as the proof would), and does not count towards ``limit``.

    Raises:
        TaskError: (exit 2) the suite collected no test, or a task folder exists and not ``force``.
    """
    passed, flaky = stable_tests(runs)
    collected = set().union(*(r.outcomes for r in runs))
    if not collected:
        raise TaskError(f"{prepared.source}: pytest collected no test in the sandbox; check that the suite runs with "
                        "plain pytest and no dependency beyond the standard library")
    out_dir.mkdir(parents=True, exist_ok=True)
    tests = test_files(runs)
    library = library_files(prepared.root, tests)
    found, _ = candidates(prepared.root, runs)
    text = ProjectText(prepared.root)
    taken = {e.task for e in read_manifest(out_dir).entries if e.task and e.project != prepared.name}
    entries = []
    for cand in found:
        entry = Entry(project=prepared.name, file=cand.site.path, function=cand.site.qualname, status="dropped",
                      reason=cand.dropped, tests=cand.tests)
        if not cand.dropped and limit is not None and sum(e.status == "kept" for e in entries) >= limit:
            entry = entry.model_copy(update={"reason": f"limit: past the first {limit} tasks (--limit)"})
        elif not cand.dropped:
            entry = _write_one(prepared, cand, text, (tests, library, collected), out_dir, taken, force, entry, screen)
        entries.append(entry)
    run = ProjectRun(project=prepared.name, source=str(prepared.source), tests_collected=len(collected),
                     tests_passed=len(passed), flaky=flaky, cleaned=prepared.cleaned)
    return run, entries


def _write_one(prepared: Prepared, cand, text: ProjectText, suite: tuple[list[str], list[str], set[str]],  # noqa: ANN001
               out_dir: Path, taken: set[str], force: bool, entry: Entry, screen: Screen | None = None) -> Entry:
    """Write ``cand``'s task folder (``suite``: the test files, the library files and every collected
    node id), with the isolated harness where its covering tests allow it; returns its entry (dropped
    when ``screen`` flags the oracle of an in-process task)."""
    tests, library, collected = suite
    name = task_name(prepared.name, cand.site.path, cand.site.qualname, taken)
    task_dir = out_dir / name
    if task_dir.exists():
        if not force:
            raise TaskError(f"{task_dir}: exists; pass --force to overwrite it, or mine into an empty folder")
        shutil.rmtree(task_dir)
    with tempfile.TemporaryDirectory(prefix=".swerl-mine-", dir=out_dir) as tmp:
        repo = build_repository(text, cand, tests, Path(tmp) / "app")
        entry = entry.model_copy(update={"removed": repo.removed})
        if repo.dropped:
            return entry.model_copy(update={"reason": repo.dropped})
        plan = harness_plan(prepared.root, cand, collected, prepared.roots)
        if isinstance(plan, str) and screen is not None:
            flagged = screen(*_oracle_view(prepared, cand, repo.path))
            if flagged:
                return entry.model_copy(update={"reason": f"oracle flagged by the tamper signal: {flagged[0]} "
                                                          "(read before the proof)"})
        task = MinedTask(name, prepared.name, cand, prepared.roots, repo.removed,
                         plan=None if isinstance(plan, str) else plan, in_process_because=plan if isinstance(plan, str) else "")
        write_mined_task(task, repo.path, prepared.root, tests, library, Path(tmp) / name)
        (Path(tmp) / name).rename(task_dir)
    return entry.model_copy(update={"status": "kept", "task": name, "metadata": task.metadata()})


def _oracle_view(prepared: Prepared, cand, app: Path) -> tuple[dict[str, str], list[str], list[str], list[str]]:  # noqa: ANN001
    """What a :data:`Screen` reads of ``cand``'s task: the ``.py`` files of the stubbed repository
    ``app`` as ``/app/...`` with the original body back in place (the oracle), the import roots
    under ``/app``, the texts of the files of its covering tests, and the file the oracle writes."""
    files = {f"/app/{p.relative_to(app).as_posix()}": p.read_text(encoding="utf-8", errors="replace")
             for p in sorted(app.rglob("*.py")) if p.is_file()}
    files[f"/app/{cand.site.path}"] = (prepared.root / cand.site.path).read_text(encoding="utf-8", errors="replace")
    roots = ["/app" if r == "." else f"/app/{r}" for r in prepared.roots]
    test_paths = sorted({node.split("::")[0] for node in cand.tests})
    sources = [(prepared.root / t).read_text(encoding="utf-8", errors="replace") for t in test_paths
               if (prepared.root / t).is_file()]
    return files, roots, sources, [f"/app/{cand.site.path}"]


def settle(out_dir: Path, run: ProjectRun, entries: list[Entry], broken: dict[str, str]) -> Manifest:
    """Drop the tasks the sandbox proved broken (``broken``: task -> why; their folders are removed),
    merge the project's entries into ``out_dir``'s manifest and write it."""
    settled = []
    for entry in entries:
        if entry.status == "kept" and entry.task in broken:
            shutil.rmtree(out_dir / entry.task, ignore_errors=True)
            entry = entry.model_copy(update={"status": "dropped", "reason": broken[entry.task]})
        settled.append(entry)
    manifest = read_manifest(out_dir).replace_project(run, settled)
    write_manifest(out_dir, manifest)
    return manifest


def proof_reason(oracle: tuple[str, float, str] | None, null: tuple[str, float, str] | None,
                 oracle_tamper: list[str] | None = None) -> str:
    """Why a written task is dropped after its trials, '' when the oracle scored 1 with no tamper
    reason and the null 0.

    ``oracle``/``null``: (outcome, reward, detail) of the trial, or None when it did not run;
    ``oracle_tamper``: the oracle trial's tamper reasons. An oracle the tamper signal flags (its
    module reaches the interpreter by reflection, say) means an honest solution would be flagged
    too: mined tasks train under ``agent.on_tamper: zero``, where no attempt could earn a reward.
    """
    if oracle is None or oracle[0] != "passed" or oracle[1] != 1.0:
        outcome, reward, detail = oracle or ("missing", 0.0, "")
        return f"oracle fails: {outcome} (reward {reward:g}) {detail}".strip()
    if oracle_tamper:
        return f"oracle flagged by the tamper signal: {oracle_tamper[0]}"
    if null is None or null[0] != "failed" or null[1] != 0.0:
        outcome, reward, detail = null or ("missing", 0.0, "")
        return f"tests pass on the stub: {outcome} (reward {reward:g}) {detail}".strip()
    return ""
