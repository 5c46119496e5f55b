"""Does the same seed give the same run? Per generator path, two runs of the same config and seed
(A, B) and a resume of A's step 2 from its step-1 checkpoint (C), on the tiny test model (a
2-layer Llama built from a config) and the learning tasks in real Docker sandboxes:

- same samples: the response token ids of every episode of step 1 (and step 2), A vs B;
- same first update: step 1's loss and grad norm, and the weights after step 1 (checkpoint), A vs B;
- resumed step repeats: step 2's samples and record, C vs A.

Paths: HF generate on the live fp32 policy with one prompt per generate call
(``generator.max_batch_size: 1``), HF fp32 with batches of up to 4 prompts gathered over 0.2 s
(the batch composition then follows which sandbox is ready first), and HF bf16 (autocast) batched
the same way. vLLM (bf16 engine, fp32 trainer, the default SmolLM2 model: the tiny model has no
vLLM weights) in process and as one server, each with its default unseeded training rollouts and
with ``agent.seed`` set (a seed per request).

Usage: python bench/reproducibility.py [--paths hf-fp32-b1,hf-fp32-b4,hf-bf16-b4,vllm-inprocess,...]
Prints one line per path naming the machine (bench/_machine.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))

from _machine import cpu_words  # noqa: E402

PATHS = {
    "hf-fp32-b1": {"model": {"dtype": "float32"}, "generator": {"backend": "hf", "max_batch_size": 1}},
    "hf-fp32-b4": {"model": {"dtype": "float32"}, "generator": {"backend": "hf", "max_batch_size": 4,
                                                                "batch_wait_s": 0.2}},
    "hf-bf16-b4": {"model": {"dtype": "bfloat16"}, "generator": {"backend": "hf", "max_batch_size": 4,
                                                                 "batch_wait_s": 0.2}},
}
VLLM = {"backend": "vllm", "dtype": "bfloat16", "enforce_eager": True, "max_model_len": 512, "max_num_seqs": 8,
        "max_num_batched_tokens": 1024, "kv_cache_space_gib": 1}
for _mode in ("inprocess", "servers"):
    PATHS[f"vllm-{_mode}"] = {"model": {"dtype": "float32", "path": None},
                              "generator": {**VLLM, "vllm_mode": _mode}}
    PATHS[f"vllm-{_mode}-seeded"] = {**PATHS[f"vllm-{_mode}"], "agent": {"seed": 11}}


def config(model_dir: Path, path: str):  # noqa: ANN201 - TrainConfig
    from swerl.trainer.config import TrainConfig

    extra = PATHS[path]
    return TrainConfig.model_validate({
        "model": {"path": str(model_dir), "device": "cpu", **extra["model"]},  # path None: the default model
        "data": {"tasks": str(ROOT / "examples" / "learning_tasks")},
        "agent": {"protocol": "single-turn", "temperature": 1.0, **extra.get("agent", {}),
                  "limits": {"max_new_tokens_per_turn": 6, "context_window_tokens": 256, "max_turns": 1}},
        "sandbox": {"concurrency": 8},
        "generator": extra["generator"],
        "algorithm": {"n_samples_per_prompt": 4, "min_group_size": 2, "max_seq_len": 256},
        "optimizer": {"lr": 1e-2 if extra["model"].get("path", "") is not None else 1e-5},
        "loop": {"train_batch_size": 2, "epochs": 1, "max_steps": 2, "micro_batch_size": 4},
        "checkpointing": {"ckpt_interval": 1, "hf_save_interval": 0, "keep_last": 5, "save_final": True},
        "logging": {"dump_trajectories": True, "tensorboard": False},
        "seed": 3,
    })


def samples(run: Path, step: int) -> list[tuple]:
    rows = [json.loads(line) for line in (run / "trajectories" / f"step_{step}.jsonl").read_text().splitlines()]
    return sorted((r["group_id"], r["sample_index"], tuple(r["response_ids"])) for r in rows)


def record(run: Path, step: int) -> dict:
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["global_step"] == step:
            return {k: v for k, v in rec.items() if k.startswith(("loss/", "grad_norm", "reward/"))}
    raise KeyError(step)


def record_words(a: dict, b: dict) -> str:
    """``equal``, or ``differs`` with the largest relative difference of the record's values."""
    if a == b:
        return "equal"
    rel = max((abs(a[k] - b.get(k, 0.0)) / max(abs(a[k]), 1e-12) for k in a
               if isinstance(a[k], (int, float)) and a[k] != b.get(k)), default=float("inf"))
    return f"differs (max rel {rel:.1e})"


def weights_words(a: Path, b: Path) -> str:
    """``equal``, or ``differ`` with the largest absolute difference of any weight."""
    import torch

    from swerl.trainer.persistence.checkpoint import read_model_state

    x, y = read_model_state(a), read_model_state(b)
    if x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x):
        return "equal"
    diff = max(float((x[k].float() - y[k].float()).abs().max()) for k in x if k in y)
    return f"differ (max abs {diff:.1e})"


def differing(a: list[tuple], b: list[tuple]) -> int:
    return sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))


def measure(path: str, model_dir: Path, root: Path) -> str:
    from swerl.trainer.loop import train

    cfg = config(model_dir, path)
    a, b, c = root / f"{path}-a", root / f"{path}-b", root / f"{path}-c"
    train(cfg, a)
    train(cfg, b)
    shutil.copytree(a, c)  # C: A stopped after step 1, resumed
    shutil.rmtree(c / "checkpoints" / "global_step_2")
    (c / "checkpoints" / "latest_ckpt_global_step.txt").write_text("1\n")
    train(cfg, c, resume="latest")
    same1 = differing(samples(a, 1), samples(b, 1))
    same2 = differing(samples(a, 2), samples(b, 2))
    update = record_words(record(a, 1), record(b, 1))
    weights = weights_words(a / "checkpoints" / "global_step_1", b / "checkpoints" / "global_step_1")
    resumed = differing(samples(a, 2), samples(c, 2))
    resumed_rec = record_words(record(a, 2), record(c, 2))
    n = len(samples(a, 1))
    return (f"{path}: same seed, step 1 samples differing {same1}/{n}, step 2 {same2}/{n}; step-1 record "
            f"{update}, weights after step 1 {weights}; resumed step 2 samples differing {resumed}/{n}, "
            f"record {resumed_rec} [{cpu_words()}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", default=",".join(PATHS))
    args = parser.parse_args()
    from trainer._support import save_tiny_model_dir

    with tempfile.TemporaryDirectory(prefix="swerl-repro-") as tmp:
        root = Path(tmp)
        model_dir = save_tiny_model_dir(root / "tiny-model")
        for path in args.paths.split(","):
            print(measure(path, model_dir, root), flush=True)


if __name__ == "__main__":
    main()
