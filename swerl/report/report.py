"""``swerl report``: one self-contained HTML page (PNGs embedded as data URIs) comparing runs as
arms, and the same PNGs written beside it.

Stage: after the trainer; reads run directories (``metrics.jsonl``, ``config.yaml``, exports for
the checkpoint selection) and writes files only. Each file is written to a temp path and renamed.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path

from swerl import metric_keys
from swerl.fileio import atomic_write_bytes
from swerl.errors import ConfigError
from swerl.report.arms import assign_arms, expand_run_dirs, is_eval_folder
from swerl.report.plots import all_figures, color
from swerl.report.runs import Run, load_run
from swerl.report.sections import compare_section, health_section
from swerl.selection import ema
from swerl.text import counted

ARM_COLUMNS = ["arm", "run dir", "steps", "final reward", "final EMA", "selected step (EMA)",
               "mean length", "rewarded length", "unrewarded length", "cut at length"]
"""Columns of the arms table (lengths: means over steps of ``response_length/*``, tokens; "cut at length":
the share of responses cut by the token limit, ``response_length/clip_fraction``, not PPO's ratio clipping)."""


@dataclass
class ReportResult:
    """What :func:`build_report` wrote: the HTML page, the PNGs, the arms table and the config
    keys that tell the arms apart."""

    html_path: Path
    png_paths: list[Path]
    arms: list[dict[str, str]]
    differences: list[str]
    hidden: dict[str, float] = field(default_factory=dict)
    """Metrics not drawn because they never changed (key -> their one value)."""


def _mean_of(run: Run, key: str) -> float | None:
    _, values = run.steps(key)
    return sum(values) / len(values) if values else None


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def arm_row(run: Run, span: int) -> dict[str, str]:
    """The arms-table row of one run (strings, columns of ``ARM_COLUMNS``)."""
    steps, rewards = run.steps(metric_keys.REWARD_AVG_RAW_REWARD)
    chosen = run.selection.chosen if run.selection else None
    return {
        "arm": run.label,
        "run dir": str(run.run_dir),
        "steps": str(len(steps)),  # training steps (an eval-only record of step 0 is not one)
        "final reward": _fmt(rewards[-1] if rewards else None),
        "final EMA": _fmt(ema(rewards, span)[-1] if rewards else None),
        "selected step (EMA)": f"{chosen.step} ({chosen.ema:.3f})" if chosen else "none eligible",
        "mean length": _fmt(_mean_of(run, metric_keys.RESPONSE_LENGTH_MEAN), 1),
        "rewarded length": _fmt(_mean_of(run, metric_keys.RESPONSE_LENGTH_REWARD_POS_MEAN), 1),
        "unrewarded length": _fmt(_mean_of(run, metric_keys.RESPONSE_LENGTH_REWARD_ZERO_MEAN), 1),
        "cut at length": _fmt(_mean_of(run, metric_keys.RESPONSE_LENGTH_CLIP_FRACTION)),
    }


def _table_html(arms: list[dict[str, str]], runs: list[Run]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ARM_COLUMNS)
    body = []
    for run, row in zip(runs, arms):
        swatch = f'<span class="swatch" style="background:{color(run.arm)}"></span>'
        cells = "".join(f"<td>{swatch if c == 'arm' else ''}{html.escape(row[c])}</td>" for c in ARM_COLUMNS)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


STYLE = """body{font-family:sans-serif;margin:24px;max-width:1300px;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f2f2f2}.swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:middle}
img{max-width:100%;border:1px solid #eee;margin:8px 0}code{background:#f5f5f5;padding:1px 4px}"""


def hidden_line(hidden: dict[str, float]) -> str:
    """One paragraph naming the metrics whose panels were left out because they never changed."""
    if not hidden:
        return ""
    names = ", ".join(f"<code>{html.escape(k)}</code> = {v:g}" for k, v in sorted(hidden.items()))
    return f"<p class='hidden'>Not drawn (the same value at every step of every run): {names}.</p>"


def verdict_section(runs: list[Run], span: int) -> str:
    """``<h2>Did it learn?</h2>``: per run, the headline, its evidence and the next commands."""
    from swerl.report.verdict import run_verdict

    parts = []
    for run in runs:
        v = run_verdict(run, span)
        who = f"{html.escape(run.label)}: " if len(runs) > 1 else ""
        evidence = "".join(f"<li>{html.escape(line)}</li>" for line in v.lines)
        parts.append(f"<p class='headline'><b>{who}{html.escape(v.headline)}</b></p><ul>{evidence}</ul>")
    commands = "<br>".join(f"<code>{html.escape(c)}</code>" for c in run_verdict(runs[0], span).next_commands)
    return f"<h2>Did it learn?</h2>{''.join(parts)}<p>Next: {commands}</p>" if parts else ""


def render_html(runs: list[Run], arms: list[dict[str, str]], diffs: list[str], figures: list[tuple[str, str, bytes]],
                span: int, extra: str = "", top: str = "") -> str:
    """The report page: ``top`` (the verdict), arms table, differing config keys, ``extra``
    sections (HTML: the compare section, the task health ledgers), then one section per figure."""
    diff_text = ", ".join(f"<code>{html.escape(d)}</code>" for d in diffs) or "none (one run or identical configs)"
    sections = [
        f'<h2>{html.escape(title)}</h2><img alt="{html.escape(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        for name, title, png in figures
    ]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>swerl report</title><style>{STYLE}</style></head>"
        f"<body><h1>swerl report: {counted(len(runs), 'run')}</h1>{top}"
        f"<p>Checkpoint selection: trailing EMA (span {span}) of <code>reward/avg_raw_reward</code> over "
        f"exported steps (as <code>swerl select-checkpoint</code>).</p>{_table_html(arms, runs)}"
        f"<p>Config keys that differ between arms: {diff_text}</p>{extra}{''.join(sections)}</body></html>\n"
    )


def build_report(run_dirs: list[Path], out: Path, span: int = 5) -> ReportResult:
    """Write ``out`` (HTML) and ``<out stem>-<panel>.png`` beside it for the given runs.

    Args:
        run_dirs: one or more ``swerl train`` run directories, or arm folders of seed replicas
            (their run folders are taken; replicas are grouped into arms).
        out: the HTML file to write; its folder is created.
        span: EMA span of the reward curve and the checkpoint selection.
    Returns: ReportResult.
    Raises: ConfigError for no run dirs, a missing folder or one without metrics.jsonl.
    """
    if not run_dirs:
        raise ConfigError("swerl report needs at least one RUN_DIR")
    paths = [d for d in expand_run_dirs([Path(d) for d in run_dirs]) if not is_eval_folder(d)]
    if not paths:
        raise ConfigError("swerl report draws training runs: pass run dirs of swerl train (swerl eval folders go to "
                          "swerl compare)")
    runs = [load_run(d, span) for d in paths]
    diffs = assign_arms(runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, str, bytes]] = []
    pngs: list[Path] = []
    shown, hidden = all_figures(runs, span)
    for name, title, fig in shown:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90)
        png = buf.getvalue()
        path = out.parent / f"{out.stem}-{name}.png"
        atomic_write_bytes(path, png)
        pngs.append(path)
        figures.append((name, title, png))
    arms = [arm_row(r, span) for r in runs]
    extra = (compare_section(paths, span) if len({r.arm for r in runs}) > 1 else "") + health_section(paths)
    extra += hidden_line(hidden)
    page = render_html(runs, arms, diffs, figures, span, extra, verdict_section(runs, span))
    atomic_write_bytes(out, page.encode("utf-8"))
    return ReportResult(html_path=out, png_paths=pngs, arms=arms, differences=diffs, hidden=hidden)
