"""``swerl select-checkpoint``: the export with the best trailing EMA of a metric."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from swerl import metric_keys
from swerl.cli.common import JsonOut, Mode, Verbose, results_console, write_json


def select_checkpoint_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory of `swerl train` (all metrics.jsonl below it).")],
    metric: Annotated[str, typer.Option(help="Metric key to smooth.")] = metric_keys.REWARD_AVG_RAW_REWARD,
    span: Annotated[int, typer.Option(help="EMA span (alpha = 2/(span+1)).")] = 5,
    mode: Annotated[Mode, typer.Option(help="max for rewards, min for losses.")] = Mode("max"),
    interval: Annotated[
        Optional[int], typer.Option(help="Export interval; default: hf_save_interval of RUN_DIR/config.yaml, else 5.")
    ] = None,
    json_out: JsonOut = None,
    skip_bad_lines: Annotated[bool, typer.Option(help="Skip malformed metrics lines (reported on stderr).")] = False,
    verbose: Verbose = False,
) -> None:
    """Pick the checkpoint with the best trailing EMA of a metric (default: 5-step EMA of reward/avg_raw_reward)."""
    from swerl.errors import RunFailed
    from swerl.selection import select_checkpoint

    sel = select_checkpoint(run_dir, metric, span, mode.value, interval, skip_bad_lines)  # type: ignore[arg-type]
    _render_selection(sel, results_console(json_out))
    write_json(json_out, sel.model_dump(mode="json"))
    if sel.chosen is None:
        which = f"a step >= {2 * sel.interval}" if sel.interval == 1 else (
            f"a step that is a multiple of {sel.interval}, >= {2 * sel.interval},")
        raise RunFailed(
            f"no eligible step in {run_dir}: need {which} with an export folder exports/global_step_<N> "
            "(see the table; a run of fewer steps has none to choose)"
        )


def _render_selection(sel, console: Console) -> None:  # noqa: ANN001 - swerl.selection.Selection
    """Candidates table, then the chosen step."""
    from rich.table import Table

    table = Table(title=f"{sel.metric}: EMA span {sel.span}, mode {sel.mode}, interval {sel.interval} "
                        f"({sel.interval_source})")
    for col in ("step", "value", "EMA", "eligible"):
        table.add_column(col, justify="right" if col != "eligible" else "left")
    chosen_step = sel.chosen.step if sel.chosen else None
    for c in sel.candidates:
        mark = "[bold green]selected[/]" if c.step == chosen_step else ("yes" if c.eligible else f"no: {c.reason}")
        table.add_row(str(c.step), f"{c.value:.4f}", f"{c.ema:.4f}", mark)
    console.print(table)
    if sel.chosen is not None:
        console.print(
            f"selected step {sel.chosen.step}: EMA {sel.chosen.ema:.4f} of {sel.metric} -> {sel.chosen.export_path}",
            highlight=False, soft_wrap=True,
        )
