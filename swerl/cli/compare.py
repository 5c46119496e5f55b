"""``swerl compare``: paired statistics between arms on a pinned eval set, and their training."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from swerl.cli.common import JsonOut, Verbose, results_console, write_json


def compare_cmd(
    runs: Annotated[list[Path], typer.Argument(
        help="Two or more arms: run dirs of `swerl train`, arm folders of seed replicas (--seeds), or `swerl eval` "
             "output folders. The first arm is the reference.")],
    step: Annotated[Optional[int], typer.Option(
        min=0, help="Eval step of the runs (RUN_DIR/eval/step_N.jsonl); default: the latest every run evaluated.")] = None,
    unpaired: Annotated[bool, typer.Option(
        "--unpaired", help="Compare evaluations whose tasks, samples or seeds differ, as independent samples "
                           "(marked unpaired; Fisher's exact test in place of McNemar).")] = False,
    all_pairs: Annotated[bool, typer.Option("--all-pairs", help="Every pair of arms (default: each arm against the first).")] = False,
    resamples: Annotated[int, typer.Option(min=100, help="Bootstrap resamples B (over tasks).")] = 10_000,
    bootstrap_seed: Annotated[int, typer.Option(help="Seed of the bootstrap (the CIs are reproducible).")] = 0,
    level: Annotated[float, typer.Option(min=0.5, max=0.999, help="Confidence level of the CIs.")] = 0.95,
    span: Annotated[int, typer.Option(min=1, help="EMA span of the training reward and the checkpoint selection.")] = 5,
    json_out: JsonOut = None,
    verbose: Verbose = False,
) -> None:
    """Do arms differ? Per-task paired differences of pass@1 and pass@k with bootstrap CIs, exact McNemar tests,
    training EMA and selected step per arm (mean and CI across seed replicas), one verdict line per metric.

    Runs whose eval tasks, samples or seeds differ are refused (exit 2) unless --unpaired.
    """
    from rich.table import Table

    from swerl.report.compare import arm_rows, compare_runs, header

    cmp = compare_runs(runs, step=step, unpaired=unpaired, all_pairs=all_pairs, resamples=resamples,
                       seed=bootstrap_seed, level=level, span=span)
    console = results_console(json_out)
    console.print(header(cmp), highlight=False, soft_wrap=True)
    columns, rows = arm_rows(cmp)
    table = Table(title="arms (mean [CI] across replicas)", title_justify="left")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for verdict in cmp.verdicts:
        console.print(verdict.text, highlight=False, soft_wrap=True)
    if cmp.learning:
        console.print("each arm against its initial policy (eval step 0):", highlight=False)
        for verdict in cmp.learning:
            console.print(f"  {verdict.text}", highlight=False, soft_wrap=True)
    for note in cmp.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    write_json(json_out, cmp.model_dump(mode="json"))
