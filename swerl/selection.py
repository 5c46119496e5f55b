"""Checkpoint selection: the trailing-EMA rule over a run's ``metrics.jsonl`` (docs/algorithms.md, Metrics and checkpoint selection).

Stage: last, after training; reads files only (no torch). ``swerl select-checkpoint`` renders
the returned :class:`Selection`.

Rule: r_s = the metric at step s from every ``metrics.jsonl`` under RUN_DIR (restarts
included), sorted by step, first value wins for a duplicated step; EMA with alpha = 2/(span+1),
EMA_1 = r_1, EMA_k = alpha * r_k + (1 - alpha) * EMA_{k-1} over the logged steps in order
(missing steps skipped). Eligible: step % interval == 0, step >= 2 * interval, the export
``RUN_DIR/exports/global_step_<N>`` exists, step <= the latest logged step. Pick argmax EMA
(``mode="min"``: argmin) over eligible steps; ties go to the earlier step.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel

from swerl import metric_keys
from swerl.errors import ConfigError, SwerlError
from swerl.run_layout import CONFIG_FILE, EXPORT_DIR, METRICS_FILE, export_dir
from swerl.text import counted, did_you_mean

log = logging.getLogger(__name__)

DEFAULT_METRIC = metric_keys.REWARD_AVG_RAW_REWARD
DEFAULT_SPAN = 5
DEFAULT_INTERVAL = 5

__all__ = ["MetricsFileError", "Candidate", "Selection", "ema", "read_metric", "select_checkpoint"]


class MetricsFileError(SwerlError, ValueError):
    """A metrics.jsonl line is malformed, or the run directory holds no usable metric (exit 2)."""

    exit_code = 2


class Candidate(BaseModel):
    """One logged step.

    Attributes:
        step: global step. value: raw metric r_s. ema: EMA after this step.
        eligible: whether the step may be selected; reason: why not (None when eligible).
        export_path: ``RUN_DIR/exports/global_step_<N>`` when that folder exists.
    """

    step: int
    value: float
    ema: float
    eligible: bool
    reason: str | None = None
    export_path: str | None = None


class Selection(BaseModel):
    """The rule's inputs and outcome; ``chosen`` is None when no step is eligible."""

    run_dir: str
    metric: str
    span: int
    mode: Literal["max", "min"]
    interval: int
    interval_source: str
    candidates: list[Candidate]
    chosen: Candidate | None
    skipped_lines: list[str] = []


def ema(values: list[float], span: int) -> list[float]:
    """Exponential moving average with alpha = 2 / (span + 1), seeded with the first value.

    Args: values: r_1..r_K in step order. span: >= 1 (span 1 returns the values).
    Returns: EMA_1..EMA_K. Source: pandas ``ewm(span=..., adjust=False)``.
    """
    if span < 1:
        raise ValueError(f"span must be >= 1, got {span}")
    alpha = 2.0 / (span + 1)
    out: list[float] = []
    for v in values:
        out.append(v if not out else alpha * v + (1 - alpha) * out[-1])
    return out


def _metrics_files(run_dir: Path) -> list[Path]:
    """Every metrics.jsonl under run_dir: shallower first, then by path (restarts in subfolders)."""
    return sorted(run_dir.rglob(METRICS_FILE), key=lambda p: (len(p.relative_to(run_dir).parts), str(p)))


def _parse_line(text: str, metric: str) -> tuple[int, float | None]:
    """(global_step, value or None when the record lacks the metric); ValueError when malformed."""
    record = json.loads(text)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    step = record.get("global_step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"global_step must be a non-negative integer, got {step!r}")
    value = record.get(metric)
    if value is None:
        return step, None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{metric} must be a finite number, got {value!r}")
    return step, float(value)


def read_metric(
    run_dir: Path, metric: str, skip_bad_lines: bool = False
) -> tuple[list[tuple[int, float]], list[str]]:
    """The metric series of a run: (step, value) sorted by step, first value per step.

    Args:
        run_dir: the run directory; every ``metrics.jsonl`` below it is read.
        metric: key of the metric (records without it are ignored).
        skip_bad_lines: report malformed lines in the second return value instead of raising.
    Returns: (series, skipped) where skipped lists ``file:line: why`` of skipped lines.
    Raises: MetricsFileError (exit 2) naming file:line of malformed lines (unless skipped),
        when no metrics.jsonl exists, or when no record holds the metric.
    """
    files = _metrics_files(run_dir)
    if not files:
        raise MetricsFileError(f"no {METRICS_FILE} under {run_dir}: pass the run directory of a swerl train run")
    first: dict[int, float] = {}
    bad: list[str] = []
    keys: set[str] = set()
    for path in files:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for lineno, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                try:
                    step, value = _parse_line(text, metric)
                except (ValueError, RecursionError) as err:
                    bad.append(f"{path}:{lineno}: {str(err).splitlines()[0]}")
                    continue
                if value is None:
                    keys.update(k for k in json.loads(text) if k != "global_step")
                    continue
                first.setdefault(step, value)
    if bad and not skip_bad_lines:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise MetricsFileError(f"malformed metrics line {bad[0]}{more}: fix it or pass --skip-bad-lines")
    for line in bad:
        log.warning("skipped malformed metrics line %s", line)
    if not first:
        # What a selection ranks by comes first: rewards and held-out scores, then the rest.
        known = sorted(keys, key=lambda k: (not k.startswith(("reward/", "eval/")), k))
        hint = did_you_mean(metric, known, listed=8) if known else "the records hold no metric"
        raise MetricsFileError(f"--metric {metric}: in no record of {counted(len(files), 'metrics file')} under "
                               f"{run_dir}; {hint}")
    return sorted(first.items()), bad


def _find_key(node: object, key: str) -> object:
    """First value of ``key`` in a nested mapping, breadth first."""
    queue = [node]
    while queue:
        cur = queue.pop(0)
        if isinstance(cur, dict):
            if key in cur:
                return cur[key]
            queue.extend(cur.values())
    return None


def export_interval(run_dir: Path, override: int | None = None) -> tuple[int, str]:
    """The export interval: ``override``, else ``hf_save_interval`` of ``RUN_DIR/config.yaml``
    (when > 0), else 5. Returns (interval, where it came from).

    Raises: ConfigError when the override is < 1 or config.yaml is unreadable YAML.
    """
    if override is not None:
        if override < 1:
            raise ConfigError(f"--interval must be >= 1, got {override}")
        return override, "--interval"
    config = run_dir / CONFIG_FILE
    if config.is_file():
        try:
            value = _find_key(yaml.safe_load(config.read_text()), "hf_save_interval")
        except yaml.YAMLError as err:
            raise ConfigError(f"{config}: not valid YAML ({str(err).splitlines()[0]}): pass --interval") from err
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, f"hf_save_interval of {config}"
    return DEFAULT_INTERVAL, "default"


def _why_not(step: int, latest: int, interval: int, export: Path) -> str | None:
    if step % interval:
        return f"not a multiple of {interval}"
    if step < 2 * interval:
        return f"before step {2 * interval} (2 x interval)"
    if step > latest:
        return f"after the latest step {latest}"
    if not export.is_dir():
        return f"no export {EXPORT_DIR}/{export.name}"
    return None


def select_checkpoint(
    run_dir: Path,
    metric: str = DEFAULT_METRIC,
    span: int = DEFAULT_SPAN,
    mode: Literal["max", "min"] = "max",
    interval: int | None = None,
    skip_bad_lines: bool = False,
) -> Selection:
    """Apply the trailing-EMA rule (module docstring) to a run directory.

    Args:
        run_dir: a ``swerl train`` run directory.
        metric: metric key; span: EMA span (>= 1); mode: ``max`` (rewards) or ``min`` (losses).
        interval: export interval override (else config.yaml ``hf_save_interval``, else 5).
        skip_bad_lines: skip malformed metrics lines instead of failing.
    Returns: Selection (``chosen`` None when no step is eligible).
    Raises: ConfigError (missing run dir, bad span/interval), MetricsFileError (exit 2).
    """
    if not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir} does not exist: pass the RUN_DIR of a swerl train run")
    if span < 1:
        raise ConfigError(f"--span must be >= 1, got {span}")
    every, source = export_interval(run_dir, interval)
    series, skipped = read_metric(run_dir, metric, skip_bad_lines)
    latest = series[-1][0]
    candidates = []
    for (step, value), smoothed in zip(series, ema([v for _, v in series], span)):
        export = export_dir(run_dir, step)
        reason = _why_not(step, latest, every, export)
        candidates.append(Candidate(
            step=step, value=value, ema=smoothed, eligible=reason is None, reason=reason,
            export_path=str(export) if export.is_dir() else None,
        ))
    sign = 1.0 if mode == "max" else -1.0
    chosen: Candidate | None = None
    for cand in candidates:  # ascending steps: strict improvement keeps the earlier step on ties
        if cand.eligible and (chosen is None or sign * cand.ema > sign * chosen.ema):
            chosen = cand
    return Selection(
        run_dir=str(run_dir), metric=metric, span=span, mode=mode, interval=every, interval_source=source,
        candidates=candidates, chosen=chosen, skipped_lines=skipped,
    )
