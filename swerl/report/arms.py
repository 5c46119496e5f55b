"""Runs grouped into arms: seed replicas (runs whose configs differ only in ``seed``) are one arm.

Stage: after the trainer; reads folders only. ``swerl train CONFIG --seeds 0,1,2 --out ARM``
writes ``ARM/seed0``, ``ARM/seed1``, ``ARM/seed2``: pass ``ARM`` (its run folders are taken) or
the run folders themselves. An arm is named by its folder: the parent of ``seedN`` run folders,
else the run folder.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swerl.errors import ConfigError
from swerl.report.runs import LABEL_IGNORED_PREFIXES, Run, flatten, label_arms
from swerl.selection import METRICS_FILE

REPLICA_KEYS = ("seed",)
"""Config keys in which seed replicas of one arm differ."""
REPLICA_FOLDER = re.compile(r"^seed\d+$")
"""Run folders ``swerl train --seeds`` writes (``seed0``, ``seed1``, ...)."""
EVAL_FILE = "trajectories.jsonl"
"""What marks a ``swerl eval`` output folder."""


def is_run_folder(path: Path) -> bool:
    """A ``swerl train`` run folder (config.yaml or metrics.jsonl) or a ``swerl eval`` output folder."""
    return any((path / name).is_file() for name in ("config.yaml", METRICS_FILE, EVAL_FILE))


def is_eval_folder(path: Path) -> bool:
    """A ``swerl eval`` output folder (not a training run)."""
    return (path / EVAL_FILE).is_file()


def expand_run_dirs(paths: list[Path]) -> list[Path]:
    """Every path that is a run (or eval) folder, and the run folders directly inside every other
    path (an arm folder of seed replicas), in the order given.

    Raises: ConfigError naming a path that does not exist or holds no run.
    """
    out: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise ConfigError(f"{path} does not exist: pass a swerl train run dir, an arm folder of seed replicas "
                              "or a swerl eval output folder")
        if is_run_folder(path):
            out.append(path)
            continue
        inner = sorted(p for p in path.iterdir() if p.is_dir() and is_run_folder(p))
        if not inner:
            raise ConfigError(f"{path}: no metrics.jsonl, config.yaml or trajectories.jsonl, nor run folders inside: "
                              "pass the run dir of a swerl train run or a swerl eval output folder")
        out.extend(inner)
    return out


def arm_key(config: dict[str, Any]) -> str:
    """What replicas of one arm share: the flattened config without the replica keys and the
    keys that never tell arms apart (``logging.*``), as canonical JSON."""
    flat = {k: v for k, v in flatten(config).items()
            if k not in REPLICA_KEYS and not k.startswith(LABEL_IGNORED_PREFIXES)}
    return json.dumps(flat, sort_keys=True, default=str)


def arm_name(run_dir: Path) -> str:
    """The arm's name: the parent folder of a ``seedN`` run folder, else the run folder's name."""
    return run_dir.parent.name if REPLICA_FOLDER.match(run_dir.name) else run_dir.name


@dataclass
class Arm:
    """One arm: a name and the run folders of its replicas (one or more), in the order given."""

    name: str
    run_dirs: list[Path] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)


def group_arms(run_dirs: list[Path], configs: list[dict[str, Any]]) -> list[Arm]:
    """Group runs into arms: equal :func:`arm_key` (configs equal but for ``seed``) and the same
    arm name. Runs without a config (``swerl eval`` folders) are an arm each.

    Args: run_dirs: run folders (after :func:`expand_run_dirs`); configs: their config.yaml dicts
        ({} when absent), aligned.
    Returns: arms in order of first appearance; names made unique by prefixing the parent folder.
    """
    arms: dict[tuple[str, str], Arm] = {}
    for run_dir, config in zip(run_dirs, configs):
        key = (arm_name(run_dir), arm_key(config) if config else f"eval:{run_dir}")
        arm = arms.setdefault(key, Arm(name=key[0], config=config))
        arm.run_dirs.append(run_dir)
    out = list(arms.values())
    if len({a.name for a in out}) < len(out):
        for arm in out:
            first = arm.run_dirs[0]
            parent = first.parent.parent if REPLICA_FOLDER.match(first.name) else first.parent
            arm.name = f"{parent.name}/{arm.name}"
    if len({a.name for a in out}) < len(out):  # same folder, different configs
        for i, arm in enumerate(out, start=1):
            arm.name = f"{arm.name} #{i}"
    return out


def assign_arms(runs: list[Run]) -> list[str]:
    """Set each run's ``arm`` (index of its arm, :func:`group_arms`), ``label`` and ``arm_label``.

    Without replicas, labels are those of :func:`label_arms`. With replicas, arms are labelled by
    the config keys in which they differ (``seed`` aside) plus ``(N seeds)``, each run by its
    arm's label plus ``seed=S``.
    Returns: the config keys that tell the arms apart.
    """
    arms = group_arms([r.run_dir for r in runs], [r.config for r in runs])
    index = {d: i for i, arm in enumerate(arms) for d in arm.run_dirs}
    for run in runs:
        run.arm = index[run.run_dir]
    if all(len(arm.run_dirs) == 1 for arm in arms):
        diffs = label_arms(runs)
        for run in runs:
            run.arm_label = run.label
        return diffs
    firsts = [next(r for r in runs if r.arm == i) for i in range(len(arms))]
    diffs = label_arms(firsts, ignored=REPLICA_KEYS)
    if len(arms) > 1 and not diffs:  # arms of equal configs: their folder names tell them apart
        for first, arm in zip(firsts, arms):
            first.label = arm.name
    arm_labels = [first.label for first in firsts]
    for run in runs:
        count = len(arms[run.arm].run_dirs)
        run.arm_label = f"{arm_labels[run.arm]} ({count} seeds)" if count > 1 else arm_labels[run.arm]
        run.label = f"{arm_labels[run.arm]}, seed={run.config.get('seed')}" if count > 1 else arm_labels[run.arm]
    return diffs
