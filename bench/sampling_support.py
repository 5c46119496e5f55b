"""The TIS ratio with the sampler's top-k / top-p support scored over the whole vocabulary (full)
vs replayed (replay), on the demo model: each step samples HumanEval prompts with the HF backend
(temperature 0.7, top_k 20, top_p 0.95) from the live policy, then one optimizer step per support
mode from the same weights on the same episodes; prints ``tis/ratio_mean`` and
``tis/log_truncation_mass`` per step and mode. No sandbox: the advantage of each row is +-1 in
turn (the ratio does not depend on it). The full-mode policy is the one that samples next.

    python bench/sampling_support.py [--steps 3] [--prompts 2] [--samples 4] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_words  # noqa: E402


def main() -> None:
    from swerl.agent.trajectory import Trajectory
    from swerl.inference.backends.base import SamplingParams
    from swerl.inference.backends.hf import HFBackend
    from swerl.rl.config import AlgorithmConfig
    from swerl.trainer.distributed import DistInfo
    from swerl.trainer.step.batch import rows_from_trajectory
    from swerl.trainer.step.update import UpdateSettings, train_on_batch

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--tasks", default="runs/humaneval-tasks")
    args = parser.parse_args()
    torch.manual_seed(0)
    backend = HFBackend.from_pretrained(None, dtype="float32", seed=0)
    tok = backend.tokenizer
    folders = sorted(Path(args.tasks).iterdir())[: args.prompts]
    texts = [tok.apply_chat_template([{"role": "user", "content": (f / "instruction.md").read_text()}],
                                     add_generation_prompt=True, tokenize=False) for f in folders]
    prompts = [tok(text, add_special_tokens=False).input_ids for text in texts]
    sampling = SamplingParams(temperature=0.7, top_k=20, top_p=0.95, max_new_tokens=args.new_tokens)
    policy = backend.model
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-6)
    print(f"# {machine_words()}; SmolLM2-135M-Instruct fp32, HF generate, T 0.7, top_k 20, top_p 0.95, "
          f"{args.prompts} prompts x {args.samples} samples x {args.new_tokens} new tokens")
    for step in range(1, args.steps + 1):
        batch = [p for p in prompts for _ in range(args.samples)]
        gens = backend.generate(batch, sampling)
        trajs = [Trajectory(task_name="t", group_id=str(i // args.samples), prompt_ids=p, response_ids=g.token_ids,
                            loss_mask=[1] * len(g.token_ids), rollout_logprobs=g.logprobs, rollout_support=g.support,
                            turn_weight_versions=[step - 1]) for i, (p, g) in enumerate(zip(batch, gens, strict=True))]
        rows = [r for i, t in enumerate(trajs)
                for r in rows_from_trajectory(t, 1.0 if i % 2 else -1.0, episode_index=i, trained_version=step - 1)]
        out = {}
        for mode in ("replay", "full"):  # full last: its model is the one that samples the next step
            model = copy.deepcopy(policy) if mode == "replay" else policy
            optimizer = torch.optim.AdamW(model.parameters(), lr=2e-6) if mode == "replay" else opt
            if mode == "replay":
                optimizer.load_state_dict(opt.state_dict())
            sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
            algo = AlgorithmConfig(n_samples_per_prompt=args.samples, min_group_size=2, use_tis=True,
                                   sampling_support=mode)
            s = UpdateSettings(temperature=0.7, rows_per_mini_batch=len(rows), micro_batch_size=2, grad_clip=1.0,
                               replay_support=mode == "replay", pad_id=tok.pad_token_id or 0)
            model.train()
            metrics = train_on_batch(model, optimizer, sched, rows, algo, s, DistInfo())
            model.eval()
            out[mode] = {k: metrics[k] for k in ("tis/ratio_mean", "tis/log_truncation_mass", "tis/imp_ratio_mean",
                                                 "tis/mismatch_log_ratio_abs_mean")}
        tokens = sum(len(g.token_ids) for g in gens)
        print(json.dumps({"step": step, "tokens": tokens, **{f"{m}/{k}": round(v, 6) for m, d in out.items()
                                                               for k, v in d.items()}}), flush=True)


if __name__ == "__main__":
    main()
