"""Write a generated pymethods task set: ``OUT_DIR/{train,heldout-instance,heldout-template}/``
(each a folder of task folders) and ``OUT_DIR/manifest.json``, all at once (a temp folder
renamed into place)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from swerl.errors import TaskError
from swerl.fileio import replace_dir
from swerl.tasks.generate.plan import SPLITS, Instance, plan
from swerl.tasks.generate.write import task_spec
from swerl.tasks.pytask import write_pytask

GENERATOR = "swerl tasks generate pymethods"
MANIFEST_VERSION = 1


def task_metadata(instance: Instance) -> dict[str, str | int]:
    """``[metadata]`` of the task's task.toml (the same whatever split or seed chose it)."""
    t = instance.template
    return {"generator": GENERATOR, "family": t.family, "template": t.name, "tier": t.tier,
            "variant": instance.variant}


def manifest(instances: list[Instance], seed: int, count: int, heldout_count: int, tiers: tuple[int, ...]) -> dict:
    """The manifest: the arguments, each split's templates, and per task its split, family,
    template, tier, variant number and variant parameters."""
    splits = {s: sorted({i.template.name for i in instances if i.split == s}) for s in SPLITS}
    return {
        "generator": GENERATOR, "version": MANIFEST_VERSION, "seed": seed, "count": count,
        "heldout_count": heldout_count, "tiers": list(tiers),
        "templates": splits,
        "tasks": [{"name": i.name, "split": i.split, "family": i.template.family, "template": i.template.name,
                   "tier": i.template.tier, "variant": i.variant, "params": i.template.params(i.variant), "seed": seed}
                  for i in instances],
    }


def generate_pymethods(out_dir: Path | str, *, seed: int = 0, count: int = 1000, heldout_count: int = 48,
                       tiers: tuple[int, ...] = (1, 2, 3), force: bool = False) -> dict:
    """Write the task set into ``out_dir`` and return its manifest.

    The same arguments give the same bytes. Nothing is visible at ``out_dir`` until every task
    is written (a sibling temp folder renamed into place; with ``force`` an existing
    ``out_dir`` is replaced).

    Raises:
        TaskError: ``out_dir`` exists and ``force`` is off, or it is a file.
        ConfigError: more tasks asked for than the chosen tiers' templates hold.
    """
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and (not out.is_dir() or not force):
        raise TaskError(f"{out}: already exists; pass --force to replace it, or choose a new folder")
    instances = plan(seed, count, heldout_count, tiers)
    info = manifest(instances, seed, count, heldout_count, tiers)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for split in SPLITS:
            (staging / split).mkdir()
        for instance in instances:
            spec = task_spec(instance.name, instance.template, instance.variant, task_metadata(instance))
            write_pytask(spec, staging / instance.split / instance.name)
        (staging / "manifest.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        staging.chmod(0o755)
        replace_dir(staging, out, fsync=False)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return info
