"""``swerl report`` (runs side by side as HTML + PNGs) and ``swerl view`` (read episodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from swerl.cli.common import (
    JsonOut, Verbose, err_console, out_console, output_file_callback, results_console, write_json,
)


def report_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories of `swerl train` (one arm each).")],
    out: Annotated[Path, typer.Option(
        callback=output_file_callback, help="HTML file to write; the PNGs go beside it.")] = Path("report.html"),
    span: Annotated[int, typer.Option(min=1, help="EMA span of the reward curve and the checkpoint selection.")] = 5,
    json_out: JsonOut = None,
    verbose: Verbose = False,
) -> None:
    """Plot runs side by side: reward + EMA + selected checkpoint, pass@n, eval, lengths, TIS, time, outcomes."""
    from rich.table import Table

    from swerl.report.report import ARM_COLUMNS, build_report

    result = build_report(run_dirs, out, span)
    console = results_console(json_out)
    write_json(json_out, {"html": str(result.html_path), "pngs": [str(p) for p in result.png_paths],
                           "arms": result.arms})
    for i, row in enumerate(result.arms, start=1):
        console.print(f"arm {i}: {row['arm']} ({row['run dir']})", highlight=False, soft_wrap=True)
    table = Table(title="arms", title_justify="left")  # one column per arm: fits a terminal
    table.add_column("")
    for i in range(len(result.arms)):
        table.add_column(f"arm {i + 1}", justify="right")
    for column in ARM_COLUMNS[2:]:
        table.add_row(column, *(row[column] for row in result.arms))
    console.print(table)
    err_console.print(f"wrote {result.html_path} and {len(result.png_paths)} PNGs beside it", highlight=False)


def view_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory of `swerl train`, or an output folder of `swerl eval`.")],
    step: Annotated[Optional[int], typer.Option(help="Training step whose trajectories to show (default: the latest).")] = None,
    task: Annotated[Optional[str], typer.Option(help="Show the conversations of this task's episodes.")] = None,
    sample: Annotated[Optional[int], typer.Option(help="With --task: only this sample index.")] = None,
    out: Annotated[Optional[Path], typer.Option(
        callback=output_file_callback, help="Write one self-contained HTML viewer instead: every trained episode of "
                                            "every dumped step (or --step), to filter, sort and read.")] = None,
    verbose: Verbose = False,
) -> None:
    """Read episodes: groups, then episodes (reward, advantage, outcome, what the verifier says), then the conversation."""
    from swerl.report.view import load_episodes, render_terminal

    if out is not None:
        from swerl.report.viewer import write_html

        episodes = load_episodes(run_dir, step, all_steps=True)
        write_html(episodes, out)
        err_console.print(f"wrote {out} ({len(episodes.episodes)} episodes); open it in a browser", highlight=False)
        return
    render_terminal(load_episodes(run_dir, step), out_console, task=task, sample=sample)
