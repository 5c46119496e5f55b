"""The repository a mined task puts in ``/app``: the clean project with one body stubbed, the files
holding its covering tests removed, and no other copy of the removed body anywhere.

A copy of the body is searched for in every file with whitespace removed (:func:`normalised`), so a
re-indented or re-wrapped copy in the docs, a vendored module or a generated file is found too. A
copy in a non-Python file is removed with that file; a copy in a Python file (which the code may
import) drops the candidate.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from swerl.tasks.mine.candidates import Candidate
from swerl.tasks.mine.functions import normalised, stubbed


@dataclass
class Repository:
    """A stubbed repository written to ``path``, or why the candidate cannot have one."""

    path: Path
    removed: list[str] = field(default_factory=list)  # relative paths left out of /app, with why
    dropped: str = ""


class ProjectText:
    """Every file of a clean project, normalised once (read as UTF-8, undecodable bytes dropped)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        self._text = {rel: normalised((root / rel).read_bytes().decode("utf-8", "ignore")) for rel in self.files}

    def holding(self, needle: str, skip: set[str]) -> list[str]:
        """The files (not in ``skip``) whose normalised text contains ``needle`` (normalised)."""
        return [rel for rel in self.files if rel not in skip and needle in self._text[rel]]


def build_repository(project: ProjectText, cand: Candidate, test_files: list[str], dest: Path) -> Repository:
    """Write the task's ``/app`` for ``cand`` under ``dest`` (created): the project without the files
    holding a test that called it (covering or not: a failing or flaky test shows expected values too), the body stubbed, every other copy of the body removed (or the candidate
    dropped, ``dest`` then removed)."""
    site = cand.site
    covering = sorted({t.split("::")[0] for t in cand.tests + sorted(cand.callers)})  # a failing caller shows values too
    source = (project.root / site.path).read_text(encoding="utf-8")
    stub = stubbed(source, site)
    body = normalised(site.body_text)
    removed = [f"{rel} (holds a test that calls it)" for rel in covering]
    if body in normalised(stub):
        return Repository(dest, removed, f"leak: the body is also elsewhere in {site.path}")
    copies = project.holding(body, skip={site.path, *covering})
    in_code = [rel for rel in copies if rel.endswith(".py") and rel not in test_files]
    if in_code:
        return Repository(dest, removed, f"leak: the body is also in {', '.join(in_code[:3])}")
    removed += [f"{rel} (holds a copy of the body)" for rel in copies]
    gone = set(covering) | set(copies)
    shutil.copytree(project.root, dest, symlinks=True,
                    ignore=lambda folder, names: [n for n in names
                                                  if (Path(folder) / n).relative_to(project.root).as_posix() in gone])
    (dest / site.path).write_text(stub, encoding="utf-8")
    return Repository(dest, removed)
