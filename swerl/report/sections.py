"""The report's text sections (HTML): the arm comparison of ``swerl compare`` and the task
health ledger of ``swerl tasks health``, each from the same library call as its command.

Stage: after the trainer; reads run folders only.
"""

from __future__ import annotations

import html
from pathlib import Path

from swerl.errors import ConfigError


def _table(columns: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def compare_section(paths: list[Path], span: int) -> str:
    """``<h2>Do the arms differ?</h2>``: what ``swerl compare`` prints for these runs (header,
    arms table, verdict lines), or the reason it cannot compare them (no evaluation, unpaired)."""
    from swerl.report.compare import arm_rows, compare_runs, header

    title = "<h2>Do the arms differ? (swerl compare)</h2>"
    try:
        cmp = compare_runs(paths, span=span)
    except ConfigError as err:
        return f"{title}<p>Not compared: {html.escape(str(err))}</p>"
    lines = [v.text for v in cmp.verdicts] + [f"{v.text} (against its initial policy)" for v in cmp.learning]
    verdicts = "".join(f"<li><code>{html.escape(line)}</code></li>" for line in lines)
    notes = "".join(f"<p>note: {html.escape(note)}</p>" for note in cmp.notes)
    return f"{title}<p>{html.escape(header(cmp))}</p>{_table(*arm_rows(cmp))}<ul>{verdicts}</ul>{notes}"


def health_section(paths: list[Path]) -> str:
    """``<h2>Task health</h2>``: per run, the ledger's summary line and its flagged tasks (the
    default thresholds of ``swerl tasks health``); runs without rollout records are skipped."""
    from swerl.report.health import build_health, health_rows, summary_line
    from swerl.task_health import HealthRules, rollout_steps

    parts = []
    for path in paths:
        if not rollout_steps(path):
            continue
        report = build_health(path, HealthRules())
        columns, rows = health_rows(report)
        table = _table(columns, rows) if rows else ""
        parts.append(f"<h3>{html.escape(str(path))}</h3><p>{html.escape(summary_line(report))}</p>{table}")
    if not parts:
        return ""
    return ("<h2>Task health (swerl tasks health)</h2><p>Flags: saturated = every sample passed in the last 2 groups, "
            "never_solved = no sample passed in 2 or more groups, infra_flaky / verifier_suspect = over 25% of attempts "
            "failed on the infrastructure / in the verifier.</p>" + "".join(parts))
