"""Golden comparison of a short real training run: the same run on two trees (or twice on one)
must give the same metrics and the same final weights, bit for bit.

The run is bench/golden.yaml (2 steps of RLOO-n, SmolLM2-135M-Instruct, HF generate on the live
fp32 module, 4 HumanEval problems in Docker sandboxes; about 2-3 min on 2 CPU cores). What is
compared, per run folder:

- metrics.jsonl, every record without its timing keys (``timing/*``, ``async/busy_*``,
  ``rollout/buffer_depth``, ``rollout/control_s``: wall-clock figures);
- trajectories/step_N.jsonl, every row without ``timings_s`` and ``verifier_output_tail``
  (pytest prints its wall time);
- the final export (exports/global_step_N/model.safetensors, highest N): the sha256 of every
  tensor's bytes, and one sha256 over all of them in name order (the "weights hash").

Usage:
  python bench/golden_compare.py run --tree TREE --tasks TASKS_DIR --out RUN_DIR
      (runs ``swerl train bench/golden.yaml`` with TREE first on PYTHONPATH; imports HumanEval
      into TASKS_DIR when it is missing; writes RUN_DIR/golden.json and prints its hashes)
  python bench/golden_compare.py compare RUN_DIR_A RUN_DIR_B
      (exit 0 and "identical" when metrics, trajectories and every tensor agree; else exit 1
      and the first differences)
On a shared machine, run it under a lock that serializes heavy jobs (``flock LOCKFILE python ...``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import cpu_words  # noqa: E402

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "golden.yaml"
TIMING_PREFIXES = ("timing/", "async/busy", "rollout/buffer_depth", "rollout/control_s")
TRAJECTORY_TIMING_KEYS = ("timings_s", "verifier_output_tail")


def untimed_metrics(run_dir: Path) -> list[dict]:
    """metrics.jsonl records without their wall-clock keys."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith(TIMING_PREFIXES)} for line in lines]


def untimed_trajectories(run_dir: Path) -> dict[str, list[dict]]:
    """trajectories/step_N.jsonl rows without timings, sorted by (group, sample), per file name."""
    out = {}
    for path in sorted((run_dir / "trajectories").glob("step_*.jsonl")):
        rows = [{k: v for k, v in json.loads(line).items() if k not in TRAJECTORY_TIMING_KEYS}
                for line in path.read_text().splitlines()]
        out[path.name] = sorted(rows, key=lambda r: (r["group_id"], r["sample_index"]))
    return out


def final_export(run_dir: Path) -> Path:
    """The model.safetensors of the highest exports/global_step_N."""
    steps = sorted((run_dir / "exports").glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    if not steps:
        raise SystemExit(f"{run_dir}: no exports/global_step_N (did the run finish?)")
    return steps[-1] / "model.safetensors"


def tensor_hashes(path: Path) -> dict[str, str]:
    """name -> sha256 of the tensor's raw bytes (dtype and shape folded in)."""
    import torch
    from safetensors.torch import load_file

    out = {}
    for name, tensor in sorted(load_file(path).items()):
        digest = hashlib.sha256(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes())
        out[name] = digest.hexdigest()
    return out


def digest(run_dir: Path) -> dict:
    """Everything compared, plus a metrics hash and a weights hash to quote."""
    metrics, trajectories = untimed_metrics(run_dir), untimed_trajectories(run_dir)
    tensors = tensor_hashes(final_export(run_dir))
    return {
        "export": str(final_export(run_dir).relative_to(run_dir)),
        "metrics_sha256": hashlib.sha256(json.dumps(metrics, sort_keys=True).encode()).hexdigest(),
        "trajectories_sha256": hashlib.sha256(json.dumps(trajectories, sort_keys=True).encode()).hexdigest(),
        "weights_sha256": hashlib.sha256("".join(f"{n}={h}\n" for n, h in tensors.items()).encode()).hexdigest(),
        "tensors": tensors, "metrics": metrics,
    }


def run(tree: Path, tasks: Path, out: Path) -> None:
    """Train bench/golden.yaml with ``tree``'s swerl; write out/golden.json."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if not tasks.is_dir():
        subprocess.run([sys.executable, "-m", "swerl.cli", "tasks", "import", "humaneval", str(tasks)], env=env, check=True)
    if out.exists():
        raise SystemExit(f"{out} exists: pick a new --out")
    print(f"machine: {cpu_words()}; tree {tree} ({_head(tree)})", flush=True)
    cmd = [sys.executable, "-m", "swerl.cli", "train", str(CONFIG), "--set", f"data.tasks={tasks}", "--run-dir", str(out)]
    subprocess.run(cmd, env=env, check=True, cwd=tree)
    result = digest(out)
    (out / "golden.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"{out}: metrics {result['metrics_sha256']} trajectories {result['trajectories_sha256']} "
          f"weights {result['weights_sha256']} ({len(result['tensors'])} tensors of {result['export']})")


def _head(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (done.stdout.strip() or "no git") + (" + uncommitted changes" if dirty else "")


def compare(a: Path, b: Path) -> int:
    """0 when the two runs agree on everything compared, else 1 (the first differences printed)."""
    da, db = digest(a), digest(b)
    for name in ("metrics_sha256", "trajectories_sha256", "weights_sha256"):
        print(f"{name}: {da[name]} {'==' if da[name] == db[name] else '!='} {db[name]}")
    problems = [f"tensor {n}" for n in sorted(set(da["tensors"]) | set(db["tensors"]))
                if da["tensors"].get(n) != db["tensors"].get(n)]
    for step, (ra, rb) in enumerate(zip(da["metrics"], db["metrics"]), 1):
        problems += [f"step {step} {k}: {ra.get(k)} vs {rb.get(k)}" for k in sorted(set(ra) | set(rb)) if ra.get(k) != rb.get(k)]
    if len(da["metrics"]) != len(db["metrics"]):
        problems.append(f"{len(da['metrics'])} vs {len(db['metrics'])} metrics records")
    if da["trajectories_sha256"] != db["trajectories_sha256"]:
        problems.append("trajectories differ")
    print("identical" if not problems else "DIFFERENT: " + "; ".join(problems[:20]))
    return 1 if problems else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--tree", type=Path, default=HERE.parent)
    r.add_argument("--tasks", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.tree.resolve(), args.tasks.resolve(), args.out.resolve())
    else:
        print(f"machine: {cpu_words()}")
        raise SystemExit(compare(args.a, args.b))


if __name__ == "__main__":
    main()
