"""``OUT_DIR/manifest.json``: every candidate of every project mined into a folder, kept or dropped, and why."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from swerl.fileio import atomic_write_text

MANIFEST = "manifest.json"


class Entry(BaseModel):
    """One candidate: a function with covering tests (or none), and what became of it."""

    project: str
    file: str
    function: str
    status: Literal["kept", "dropped"]
    reason: str = Field("", description="Why it was dropped: a short family before ':' then the detail.")
    task: str | None = Field(None, description="The task folder's name (kept, or dropped after it was written).")
    tests: list[str] = Field(default_factory=list, description="Covering tests (node ids) that judge it.")
    removed: list[str] = Field(default_factory=list, description="Files left out of /app, each with why.")
    metadata: dict[str, str | int] = Field(default_factory=dict)


class ProjectRun(BaseModel):
    """One project's mining: where it came from, its suite, and the tests left out."""

    project: str
    source: str
    tests_collected: int
    tests_passed: int
    flaky: list[str] = Field(default_factory=list, description="Tests that passed in one run and not in the other.")
    cleaned: list[str] = Field(default_factory=list, description="Junk removed from the project before mining.")


class Manifest(BaseModel):
    projects: list[ProjectRun] = Field(default_factory=list)
    entries: list[Entry] = Field(default_factory=list)

    def family_counts(self, project: str | None = None) -> Counter[str]:
        """``Counter('kept' or a drop family -> candidates)``; the family is the reason up to its first ':'."""
        return Counter("kept" if e.status == "kept" else e.reason.split(":")[0]
                       for e in self.entries if project is None or e.project == project)

    def replace_project(self, run: ProjectRun, entries: list[Entry]) -> Manifest:
        """This manifest with ``run``'s project's earlier run and entries replaced by these."""
        return Manifest(projects=[p for p in self.projects if p.project != run.project] + [run],
                        entries=[e for e in self.entries if e.project != run.project] + entries)


def read_manifest(out_dir: Path) -> Manifest:
    """The manifest of ``out_dir``, empty when there is none yet."""
    path = out_dir / MANIFEST
    return Manifest.model_validate_json(path.read_text(encoding="utf-8")) if path.is_file() else Manifest()


def write_manifest(out_dir: Path, manifest: Manifest) -> Path:
    path = out_dir / MANIFEST
    atomic_write_text(path, manifest.model_dump_json(indent=1) + "\n")
    return path
