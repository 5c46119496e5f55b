"""Does training make the default model better on held-out tasks? The figures of ``make learn``.

Runs ``examples/learn/run.sh OUT`` (generate the pymethods family, train the default model on its
training split, evaluate both held-out splits with the initial model and the last export, and
``swerl compare`` each pair), timing it, unless ``--reuse`` finds its results already in OUT.
Then prints, per held-out split: pass@1 of the initial model and of the trained one, each with
a 95% percentile bootstrap CI over tasks (numpy PCG64, seed 0, 10,000 resamples); the paired
difference with its CI and McNemar's p, as ``swerl compare`` computed them (its verdict line);
the wall time; and the machine.

Usage: python bench/learning.py [--out runs/learn] [--reuse]
Run it alone on a quiet machine: it is a figure, not a test (about 45 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_words  # noqa: E402

from swerl.report.evalsets import load_eval_set  # noqa: E402
from swerl.report.stats import paired_bootstrap_ci  # noqa: E402

SPLITS = ("instance", "template")


def per_task_pass1(eval_dir: Path) -> dict[str, float]:
    """Task -> pass@1 (passed / judged samples; masked samples are not judgements) of one eval folder."""
    counts: dict[str, list[int]] = {}
    for record in load_eval_set(eval_dir, None).records:
        judged_passed = counts.setdefault(record["task"], [0, 0])
        if record.get("failure_class") == "mask":
            continue
        judged_passed[0] += 1
        judged_passed[1] += int(bool(record["passed"]))
    return {task: passed / judged for task, (judged, passed) in counts.items() if judged}


def pass1_text(values: dict[str, float]) -> str:
    """``0.354 [0.271, 0.438] (48 tasks)``: the mean over tasks with its bootstrap CI."""
    ci = paired_bootstrap_ci(np.array(list(values.values())))  # a one-sample bootstrap of the mean
    return f"{ci.estimate:.3f} [{ci.low:.3f}, {ci.high:.3f}] ({len(values)} tasks)"


def report(out: Path, wall_s: float | None) -> int:
    """Print the figures of a finished ``make learn`` in ``out``; 1 when a split is missing."""
    steps = sorted(int(p.name.rsplit("step", 1)[1]) for p in (out / "eval").glob("instance-step*"))
    if len(steps) < 2:
        print(f"{out}: no finished learning run (eval/instance-step0 and a later step): run without --reuse")
        return 1
    last = steps[-1]
    where = machine_words()
    for split in SPLITS:
        base, final = out / "eval" / f"{split}-step0", out / "eval" / f"{split}-step{last}"
        compare = out / f"compare-{split}.json"
        if not (base.is_dir() and final.is_dir() and compare.is_file()):
            print(f"{split}: missing {base}, {final} or {compare}")
            return 1
        verdict = json.loads(compare.read_text())["verdicts"][0]["text"]
        print(f"learning {split} split: base pass@1 {pass1_text(per_task_pass1(base))}; "
              f"after step {last} {pass1_text(per_task_pass1(final))}; {verdict}; [{where}]")
    if wall_s is not None:
        print(f"learning: make learn wall time {wall_s / 60:.1f} min; [{where}]")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/learn"), help="The learning run's folder.")
    parser.add_argument("--reuse", action="store_true", help="Only print the figures of a finished run in --out.")
    args = parser.parse_args()
    wall_s = None
    if not args.reuse:
        started = time.monotonic()
        subprocess.run(["bash", "examples/learn/run.sh", str(args.out)], check=True)
        wall_s = time.monotonic() - started
    return report(args.out, wall_s)


if __name__ == "__main__":
    raise SystemExit(main())
