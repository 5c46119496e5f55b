"""Synthetic run folders for the experiment tools: a config.yaml, a metrics.jsonl and
eval/step_N.jsonl sample records with known per-task outcomes (what ``swerl train`` writes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from swerl.agent.collect import eval_episode_seed


def eval_records(passes: dict[str, list[bool]], step: int, eval_seed: int = 0) -> list[dict]:
    """Sample records of one evaluation: ``passes[task][i]`` = sample i passed."""
    return [{"global_step": step, "task": task, "group_id": f"eval{step}/{t}:{task}", "sample_index": i,
             "seed": eval_episode_seed(eval_seed, task, i), "passed": ok, "reward": float(ok),
             "outcome": "passed" if ok else "failed", "failure_class": "none", "end_reason": "task_complete"}
            for t, (task, samples) in enumerate(sorted(passes.items())) for i, ok in enumerate(samples)]


def random_passes(rate: np.ndarray, samples: int, rng: np.random.Generator) -> dict[str, list[bool]]:
    """Per task t, ``samples`` Bernoulli(rate[t]) outcomes."""
    return {f"task-{t:03d}": [bool(x) for x in rng.random(samples) < p] for t, p in enumerate(rate)}


def make_run(run_dir: Path, config: dict, rewards: list[float], evals: dict[int, dict[str, list[bool]]],
             eval_seed: int = 0, interval: int = 5) -> Path:
    """A run folder: ``config``, one metrics record per reward, exports at every ``interval``-th
    step (empty folders: select-checkpoint only checks they exist) and the given evaluations."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "checkpointing": {"hf_save_interval": interval}}))
    lines = [json.dumps({"global_step": s, "reward/avg_raw_reward": r}) for s, r in enumerate(rewards, start=1)]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for s in range(interval, len(rewards) + 1, interval):
        (run_dir / "exports" / f"global_step_{s}").mkdir(parents=True)
    for step, passes in evals.items():
        path = run_dir / "eval" / f"step_{step}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in eval_records(passes, step, eval_seed)))
    return run_dir
