"""Reading finished runs for the report: every metrics record, the resolved config, the selected
checkpoint, and arm labels from how the configs differ.

Stage: after the trainer (reads run directories only; no torch). Records follow the rule of
``swerl.selection``: every ``metrics.jsonl`` under RUN_DIR (restarts included), sorted by step,
the first record of a duplicated step wins.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from swerl.errors import ConfigError
from swerl.run_layout import CONFIG_FILE, METRICS_FILE
from swerl.selection import DEFAULT_METRIC, Selection, select_checkpoint

log = logging.getLogger(__name__)

LABEL_IGNORED_PREFIXES = ("logging.",)
"""Config keys that never tell arms apart (where files go, not what was trained)."""


@dataclass
class Run:
    """One run directory as the report sees it.

    Attributes:
        run_dir: the directory.
        records: metrics records sorted by ``global_step`` (one per step).
        config: the resolved ``config.yaml`` as a nested dict ({} when absent).
        selection: the trailing-EMA selection of ``reward/avg_raw_reward``, or None when the
            run has no such metric.
        label: the arm's label (set by :func:`label_arms`).
        arm: index of the run's arm (seed replicas share it; set by the report).
        arm_label: the arm's label in legends ("" = ``label``).
    """

    run_dir: Path
    records: list[dict[str, Any]]
    config: dict[str, Any] = field(default_factory=dict)
    selection: Selection | None = None
    label: str = ""
    arm: int = 0
    arm_label: str = ""

    def steps(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of ``key`` over the records that hold it as a number."""
        pairs = [(r["global_step"], float(r[key])) for r in self.records
                 if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
        return [s for s, _ in pairs], [v for _, v in pairs]

    def keys(self) -> set[str]:
        """Every metric key logged by the run."""
        return {k for r in self.records for k in r if k != "global_step"}


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """Every metrics record under ``run_dir``, one per step (first wins), sorted by step.

    Raises: ConfigError when the folder has no metrics.jsonl; malformed lines are skipped with a
        warning (the report shows what it can).
    """
    files = sorted(run_dir.rglob(METRICS_FILE), key=lambda p: (len(p.relative_to(run_dir).parts), str(p)))
    if not files:
        raise ConfigError(f"{run_dir}: no {METRICS_FILE}: pass the run directory of a swerl train run")
    by_step: dict[int, dict[str, Any]] = {}
    for path in files:
        for lineno, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
                step = int(record["global_step"])
            except (ValueError, KeyError, TypeError):
                log.warning("skipped malformed metrics line %s:%d", path, lineno)
                continue
            by_step.setdefault(step, record)
    return [by_step[s] for s in sorted(by_step)]


def read_config(run_dir: Path) -> dict[str, Any]:
    """RUN_DIR/config.yaml as a nested dict ({} when absent).

    Raises: ConfigError naming the file when it is not valid YAML.
    """
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from err


def load_run(run_dir: Path, span: int = 5) -> Run:
    """Read one run directory (records, config, selection with EMA ``span``).

    Raises: ConfigError for a missing folder, no metrics.jsonl, or an unreadable config.yaml.
    """
    if not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir} does not exist: pass the RUN_DIR of a swerl train run")
    records = read_records(run_dir)
    config = read_config(run_dir)
    selection = None
    if any(DEFAULT_METRIC in r for r in records):
        selection = select_checkpoint(run_dir, DEFAULT_METRIC, span, "max", skip_bad_lines=True)
    return Run(run_dir=run_dir, records=records, config=config, selection=selection)


def flatten(node: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys: ``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists kept whole)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def config_differences(runs: list[Run], ignored: tuple[str, ...] = ()) -> list[str]:
    """Dotted config keys whose values differ between the runs (sorted), without ``ignored``."""
    flat = [flatten(r.config) for r in runs]
    keys = sorted(set().union(*flat)) if flat else []
    return [k for k in keys if not k.startswith(LABEL_IGNORED_PREFIXES) and k not in ignored
            and len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flat}) > 1]


def _value_text(value: object) -> str:
    """A config value as YAML writes it on one line (``true``, ``null``, ``1.0e-05``, ``{a: 1}``)."""
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False).strip().removesuffix("...").strip()


def _units(diffs: list[str]) -> dict[str, list[str]]:
    """Differing keys grouped by what a label shows as one part: a key of a section
    (``algorithm.use_tis``) stands alone; the keys of a nested block
    (``algorithm.rollout_correction.level``, ``.mode``) form one part named by the block."""
    units: dict[str, list[str]] = {}
    for key in diffs:
        units.setdefault(key.rsplit(".", 1)[0] if key.count(".") >= 2 else key, []).append(key)
    return units


def _unit_text(run: Run, flat: dict[str, Any], unit: str, keys: list[str]) -> str:
    """The run's value of one label part: a scalar, or the block's differing fields in flow YAML
    (``{level: sequence, mode: mask}``), or ``null`` when the run has no such block."""
    if keys == [unit]:
        return _value_text(flat.get(unit))
    block: object = run.config
    for segment in unit.split("."):
        block = block.get(segment) if isinstance(block, dict) else None
    if not isinstance(block, dict) or not block:
        return _value_text(block)
    return _value_text({name: flat.get(f"{unit}.{name}") for name in block if f"{unit}.{name}" in keys})


def label_arms(runs: list[Run], max_keys: int = 4, ignored: tuple[str, ...] = ()) -> list[str]:
    """Label each run by the config values that set it apart (``algorithm.use_tis=false, ...``).

    One run, or runs with equal configs, are labelled by their folder names. Only the last
    segment of each key (or nested block) is shown when it is unambiguous; the differing fields
    of a nested block make one part (``rollout_correction={level: sequence, mode: mask}``); at
    most ``max_keys`` parts, then ``+N more``. ``ignored`` keys never label (the report passes
    ``seed`` to label arms of seed replicas).
    Returns: the differing keys (also stored in each ``Run.label``).
    """
    diffs = config_differences(runs, ignored) if len(runs) > 1 else []
    units = _units(diffs)
    short = {u: u.rsplit(".", 1)[-1] for u in units}
    if len(set(short.values())) < len(short):
        short = {u: u for u in units}
    shown = list(units)[:max_keys]
    for run in runs:
        flat = flatten(run.config)
        parts = [f"{short[u]}={_unit_text(run, flat, u, units[u])}" for u in shown]
        if len(units) > max_keys:
            parts.append(f"+{len(units) - max_keys} more")
        run.label = ", ".join(parts) if parts else run.run_dir.name
    if len({r.label for r in runs}) < len(runs):  # equal labels: prefix the folder (and its parent)
        for run in runs:
            where = f"{run.run_dir.parent.name}/{run.run_dir.name}"
            run.label = where if run.label == run.run_dir.name else f"{where}: {run.label}"
    return diffs
