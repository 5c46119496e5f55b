"""Where a training step's time goes, on the demo config: a few steps of ``swerl train``, then the
step time and its parts from the run's own records.

    .venv/bin/python bench/step_profile.py [--config examples/pymethods-smollm2-cpu.yaml]
        [--tasks DIR] [--steps 3] [--run-dir DIR] [--set KEY=VALUE ...]

Without ``--tasks`` the demo's pymethods family is generated into a temporary folder (tier 1,
8 tasks, as ``make demo`` does). ``--set`` adds overrides (e.g. ``--set sandbox.warm_pool=false``
to see the step without warm pools). Per step it prints, from ``metrics.jsonl``:

- ``step``: ``timing/step_s``, the whole step up to its commit;
- ``rollout``: ``timing/rollout_s``, collecting the batch (every episode: container, agent, verify);
- ``generate``: the step's seconds with a generate call in flight (``async/busy_generation`` x step);
- ``update``, ``sync``, ``export``: ``timing/update_s``, ``timing/weight_sync_s``, ``timing/export_s``;
- ``pool hit``, ``wait``: ``sandbox/pool_hit_rate`` and ``sandbox/container_wait_s`` (mean per episode);

and from the dumped trajectories (``trajectories/step_N.jsonl``, the episodes the step trained on)
the mean ``agent`` and ``verify`` seconds per episode. Episodes run at once, so the per-episode
parts overlap each other and ``generate``; they do not add up to ``rollout``. The last line is the
mean over the steps after the first (the first also starts the pools and loads what later steps
find ready). The first line names the machine. Figures only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_words  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = ROOT / "examples" / "pymethods-smollm2-cpu.yaml"
# (column, metrics.jsonl key, scale key or None): a busy fraction is scaled by the step's seconds.
RECORD_PARTS = [
    ("step", "timing/step_s", None),
    ("rollout", "timing/rollout_s", None),
    ("generate", "async/busy_generation", "timing/step_s"),
    ("update", "timing/update_s", None),
    ("sync", "timing/weight_sync_s", None),
    ("export", "timing/export_s", None),
    ("wait", "sandbox/container_wait_s", None),
]
EPISODE_PARTS = [("agent", "agent_s"), ("verify", "verify_s")]
COLUMNS = ["step", "rollout", "wait", "agent", "verify", "generate", "update", "sync", "export", "pool hit"]


def swerl(*args: str) -> None:
    """Run the swerl CLI of this interpreter; raises CalledProcessError when it fails."""
    subprocess.run([sys.executable, "-m", "swerl.cli", *args], check=True, cwd=ROOT)


def step_parts(record: dict, episodes: list[dict]) -> dict[str, float | None]:
    """One step's parts, seconds (``pool hit``: a share in [0, 1]); None where the run has no figure."""
    parts: dict[str, float | None] = {}
    for column, key, scale in RECORD_PARTS:
        value = record.get(key)
        parts[column] = None if value is None else value * (record.get(scale, 0.0) if scale else 1.0)
    for column, key in EPISODE_PARTS:
        values = [e["timings_s"][key] for e in episodes if key in e.get("timings_s", {})]
        parts[column] = statistics.fmean(values) if values else None
    parts["pool hit"] = record.get("sandbox/pool_hit_rate")
    return parts


def read_run(run_dir: Path) -> list[tuple[int, dict[str, float | None]]]:
    """(step, parts) of every step the run recorded."""
    out = []
    for text in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(text)
        step = int(record["global_step"])
        dump = run_dir / "trajectories" / f"step_{step}.jsonl"
        episodes = [json.loads(x) for x in dump.read_text().splitlines()] if dump.is_file() else []
        out.append((step, step_parts(record, episodes)))
    return out


def cell(column: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0%}" if column == "pool hit" else f"{value:.2f}"


def table(rows: list[tuple[int, dict[str, float | None]]]) -> list[str]:
    """The per-step lines and the mean over the steps after the first."""
    lines = ["step  " + "  ".join(f"{c:>8}" for c in COLUMNS) + "   (seconds; wait/agent/verify: mean per episode)"]
    for step, parts in rows:
        lines.append(f"{step:>4}  " + "  ".join(f"{cell(c, parts[c]):>8}" for c in COLUMNS))
    later = [parts for step, parts in rows[1:]]
    if later:
        means = {c: (statistics.fmean(v) if (v := [p[c] for p in later if p[c] is not None]) else None) for c in COLUMNS}
        lines.append("mean  " + "  ".join(f"{cell(c, means[c]):>8}" for c in COLUMNS) + f"   (steps 2-{rows[-1][0]})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEMO_CONFIG)
    parser.add_argument("--tasks", type=Path, help="Training task folders (default: the demo's pymethods family, generated)")
    parser.add_argument("--steps", type=int, default=3, help="Steps to train (loop.max_steps)")
    parser.add_argument("--run-dir", type=Path, help="Keep the run here (default: a temporary folder)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="More KEY=VALUE overrides")
    args = parser.parse_args()
    print(f"machine: {machine_words()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="swerl-step-profile-", ignore_cleanup_errors=True) as tmp:
        tasks = args.tasks
        if tasks is None:
            swerl("tasks", "generate", "pymethods", f"{tmp}/pymethods", "--tiers", "1", "--count", "8",
                  "--heldout-count", "8", "--force")
            tasks = Path(tmp) / "pymethods" / "train"
        run_dir = args.run_dir or Path(tmp) / "run"
        sets = [f"data.tasks={tasks}", f"loop.max_steps={args.steps}", *args.sets]
        began = time.monotonic()
        swerl("train", str(args.config), "--run-dir", str(run_dir), *(x for kv in sets for x in ("--set", kv)))
        wall = time.monotonic() - began
        print(f"config {args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config}, "
              f"{args.steps} steps, overrides: {' '.join(args.sets) or 'none'}; swerl train took {wall:.0f} s "
              f"(model load and setup included)", flush=True)
        print("\n".join(table(read_run(run_dir))), flush=True)
        print(f"machine at the end: {machine_words()}", flush=True)


if __name__ == "__main__":
    main()
