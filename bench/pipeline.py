"""Step time of the rollout pipeline at loop.max_staleness_steps = k, for several k in one run:
the CPU default (SmolLM2-135M, HumanEval verifiers in Docker), shrunk by overrides to fit a few
minutes per k, with one of two generators (``--generator``):

- ``auto`` (default): examples/humaneval-smollm2-cpu.yaml as it is: ``model.dtype`` and
  ``generator.backend`` resolved for this machine (the first lines say to what);
- ``hf``: the same example with today's fixed settings (``generator.backend=hf``,
  ``model.dtype=float32``): the HF generator in the trainer's process (at k >= 1 on its own copy
  of the policy);
- ``vllm-server``: examples/humaneval-smollm2-cpu-vllm.yaml, one vLLM OpenAI server that swerl
  starts pinned to core 0 (``generator.cpu_cores: ["0"]``, its OpenMP threads bound there) while
  the trainer process keeps the other core (the verifiers' containers are not pinned). Each k
  starts its own server (~1 min, not counted in the step times).

Per k it trains a fresh run and prints, over steps 2.. (step 1 always waits for its rollouts):
- ``step``: mean ``timing/step_s``;
- ``phases``: mean seconds of each phase per step: ``rollout`` (``timing/rollout_s``: generation,
  sandboxes and verifiers of the step's batch), of which ``gen`` (a generate call running) and
  ``sandbox`` (no generate call running), and ``update`` (optimizer step + weight sync);
- ``longest`` = max(rollout, update) and ``sum`` = rollout + update: a synchronous step costs
  ``sum``, a perfect two-stage pipeline ``longest``; ``step/longest`` is the target ratio
  (<= 1.15 at k >= 1);
- ``staleness``: mean of ``async/staleness_mean``, max of ``async/staleness_max``; ``wait``: mean
  ``timing/wait_for_rollouts_s``; ``reward``: ``reward/avg_raw_reward`` per step.

- ``sync wait``: mean ``timing/weight_sync_wait_s``, how long the trainer's weight sync waited
  for the generate call in progress (vLLM at k >= 1; the HF copy never waits).

With ``hf`` on 2 cores the generator runs on one torch thread and the update on the other (torch
ops release the GIL; ``generator.num_threads: 1`` sets one intra-op thread for the process), and
the verifiers' containers share the same two cores.

Usage: python bench/pipeline.py --tasks DIR [--generator auto|hf|vllm-server] [--ks 0,1,2,4] [--steps 5]
[--set key=value ...]
(DIR from ``swerl tasks import humaneval DIR``). Run it alone, under the CPU lock on a shared
machine: it is a figure, not a test.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {"auto": ROOT / "examples" / "humaneval-smollm2-cpu.yaml", "hf": ROOT / "examples" / "humaneval-smollm2-cpu.yaml",
            "vllm-server": ROOT / "examples" / "humaneval-smollm2-cpu-vllm.yaml"}
FIXED = {"hf": ["generator.backend=hf", "model.dtype=float32"]}  # the CPU example before auto
SHRINK = [  # fits a few minutes per k on 2 cores; no checkpoints or exports (the commit is not the subject)
    "loop.epochs=100", "checkpointing.ckpt_interval=0", "checkpointing.hf_save_interval=0",
    "checkpointing.save_final=false", "logging.tensorboard=false", "logging.dump_trajectories=false",
]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def summarize(records: list[dict]) -> dict[str, float | list[float]]:
    """The figures of one run (module docstring) from its metrics records."""
    steady = records[1:] or records
    step = [r["timing/step_s"] for r in steady]
    rollout = [r["timing/rollout_s"] for r in steady]
    update = [r["timing/update_s"] + r.get("timing/weight_sync_s", 0.0) for r in steady]
    gen = [r["async/busy_generation"] * r["timing/step_s"] for r in steady]
    sandbox = [r["async/busy_sandbox"] * r["timing/step_s"] for r in steady]
    longest, total = max(_mean(rollout), _mean(update)), _mean(rollout) + _mean(update)
    return {
        "step_s": _mean(step), "rollout_s": _mean(rollout), "gen_s": _mean(gen), "sandbox_s": _mean(sandbox),
        "update_s": _mean(update), "longest_s": longest, "sum_s": total, "ratio": _mean(step) / longest,
        "staleness_mean": _mean([r["async/staleness_mean"] for r in steady]),
        "staleness_max": max(r["async/staleness_max"] for r in records),
        "wait_s": _mean([r["timing/wait_for_rollouts_s"] for r in steady]),
        "sync_wait_s": _mean([r.get("timing/weight_sync_wait_s", 0.0) for r in steady]),
        "reward": [r["reward/avg_raw_reward"] for r in records],
    }


def run_k(k: int, generator: str, tasks: str, steps: int, extra: list[str], root: Path) -> dict:
    """Train a fresh run at staleness bound ``k`` with ``generator`` (a key of ``EXAMPLES``);
    returns :func:`summarize` of its records."""
    from swerl.trainer.config import load_train_config
    from swerl.trainer.loop import train

    overrides = [f"data.tasks={tasks}", f"loop.max_steps={steps}", f"loop.max_staleness_steps={k}", *SHRINK,
                 *FIXED.get(generator, []), *extra]
    result = train(load_train_config(EXAMPLES[generator], overrides), root / f"k{k}")
    return summarize(result.records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", required=True, help="HumanEval task folder (swerl tasks import humaneval DIR)")
    parser.add_argument("--generator", choices=sorted(EXAMPLES), default="auto",
                        help="auto: the CPU example as it is; hf: it with the HF generator in fp32 (before auto); "
                        "vllm-server: one vLLM server on core 0")
    parser.add_argument("--ks", default="0,1,2,4", help="staleness bounds to run, comma-separated")
    parser.add_argument("--steps", type=int, default=5, help="training steps per k (the first is not averaged)")
    parser.add_argument("--set", dest="extra", action="append", default=[], help="more config overrides key=value")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--one", nargs=2, metavar=("K", "ROOT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.one:  # one k per process: an in-process vLLM engine cannot be built twice in one process
        k, root = int(args.one[0]), Path(args.one[1])
        print("RESULT " + json.dumps(run_k(k, args.generator, args.tasks, args.steps, args.extra, root)), flush=True)
        return
    from swerl.trainer.setup.auto import machine_summary

    print("\n".join(machine_summary()), flush=True)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="swerl-bench-pipeline-") as tmp:
        for k in [int(x) for x in args.ks.split(",")]:
            argv = [sys.executable, __file__, "--one", str(k), tmp, "--tasks", args.tasks, "--generator", args.generator,
                    "--steps", str(args.steps), *(a for kv in args.extra for a in ("--set", kv))]
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            results = [ln[len("RESULT "):] for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode != 0 or not results:
                raise SystemExit(f"k={k} failed:\n{proc.stderr[-3000:]}")
            f = figures[k] = json.loads(results[-1])
            print(f"k={k}: step {f['step_s']:.1f}s | phases rollout {f['rollout_s']:.1f}s (gen {f['gen_s']:.1f}s, "
                  f"sandbox {f['sandbox_s']:.1f}s), update {f['update_s']:.1f}s | longest {f['longest_s']:.1f}s, "
                  f"sum {f['sum_s']:.1f}s | step/longest {f['ratio']:.2f} | staleness mean {f['staleness_mean']:.2f} "
                  f"max {f['staleness_max']:.0f} | wait {f['wait_s']:.1f}s | sync wait {f['sync_wait_s']:.1f}s | reward/step "
                  + " ".join(f"{r:.3f}" for r in f["reward"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
