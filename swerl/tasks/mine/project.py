"""The project to mine: a folder, an sdist (.tar.gz, .zip) or a wheel, unpacked into a clean copy.

Clean means nothing that holds an answer the source does not: no version-control folders, no
bytecode, no build, dist or egg-info copies, no tool caches, no virtual environments. Every
task's repository starts from this copy.
"""

from __future__ import annotations

import re
import shutil
import tarfile
import zipfile
from pathlib import Path

from swerl.errors import TaskError

JUNK_DIRS = frozenset({
    ".git", ".hg", ".svn", ".bzr", "__pycache__", "build", "dist", ".eggs", ".tox", ".nox", ".pytest_cache",
    ".mypy_cache", ".ruff_cache", ".hypothesis", ".venv", "venv", ".idea", ".vscode", "htmlcov",
})
JUNK_SUFFIXES = (".pyc", ".pyo", ".egg-info", ".dist-info", ".so", ".pyd", ".orig", ".rej", ".swp")
ARCHIVES = (".tar.gz", ".tgz", ".tar.bz2", ".zip", ".whl")


def project_name(path: Path) -> str:
    """A short lower-case name for task names: the sdist's or folder's name without its version."""
    name = path.name
    for suffix in ARCHIVES:
        name = name.removesuffix(suffix)
    name = re.sub(r"[-_]\d[\w.]*$", "", name)  # drop '-1.2.3' (and a wheel's tags after it)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "project"


def unpack(project: Path, dest: Path) -> Path:
    """Copy or unpack ``project`` into the new folder ``dest``; returns the project's root inside
    ``dest`` (an sdist's single top folder). :func:`clean` it next.

    Raises:
        TaskError: (exit 2) ``project`` is neither a folder nor a known archive, or an archive member
            points outside it.
    """
    if project.is_dir():
        shutil.copytree(project, dest, symlinks=True)  # junk included: clean() lists what it removes
    elif project.name.endswith((".tar.gz", ".tgz", ".tar.bz2")):
        dest.mkdir(parents=True)
        with tarfile.open(project) as tar:
            for member in tar.getmembers():
                _check_member(project, member.name)
                if not (member.isfile() or member.isdir()):
                    raise TaskError(f"{project}: member {member.name} is a link or device; mine a plain sdist")
            tar.extractall(dest)  # noqa: S202 - every member was checked above
    elif project.name.endswith((".zip", ".whl")):
        dest.mkdir(parents=True)
        with zipfile.ZipFile(project) as archive:
            for name in archive.namelist():
                _check_member(project, name)
            archive.extractall(dest)
    else:
        raise TaskError(f"{project}: not a folder, sdist (.tar.gz, .zip) or wheel (.whl); give the project's folder")
    entries = [p for p in dest.iterdir()]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() and not project.name.endswith(".whl") else dest


def _check_member(project: Path, name: str) -> None:
    if name.startswith("/") or ".." in Path(name).parts:
        raise TaskError(f"{project}: member {name} points outside the archive; mine an archive you trust")


def clean(root: Path) -> list[str]:
    """Remove every junk folder and file under ``root`` (see the module docstring); returns the
    removed paths, relative to ``root``."""
    removed = []
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts)):
        if not path.exists() and not path.is_symlink():
            continue  # inside a folder removed already
        if path.name in JUNK_DIRS or path.name.endswith(JUNK_SUFFIXES):
            removed.append(path.relative_to(root).as_posix())
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    return removed


def import_roots(root: Path) -> list[str]:
    """Where the project's packages import from, relative to ``root``: ``src`` when it holds one, and the root."""
    return (["src"] if (root / "src").is_dir() else []) + ["."]
