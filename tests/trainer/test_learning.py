"""The learning test: a tiny model learns, from the REAL verifier's rewards in REAL sandboxes, to
write a solution file containing MAGIC (``examples/learning_tasks``; reward 1 with MAGIC, 0.2
for a file without it, 0 for none). Mean reward must rise clearly over 20 RLOO-n steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from swerl.trainer.config import TrainConfig
from swerl.trainer.loop import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.docker
@pytest.mark.slow
def test_mean_reward_rises(tmp_path, tiny_model_dir):
    cfg = TrainConfig.model_validate({
        "model": {"path": str(tiny_model_dir), "device": "cpu"},
        "data": {"tasks": str(ROOT / "examples" / "learning_tasks")},
        "agent": {"protocol": "single-turn", "temperature": 1.0,
                  "limits": {"max_new_tokens_per_turn": 6, "context_window_tokens": 256, "max_turns": 1}},
        "sandbox": {"concurrency": 4},
        "generator": {"max_batch_size": 16},
        "algorithm": {"n_samples_per_prompt": 8, "min_group_size": 2, "loss_reduction": "token_mean"},
        "optimizer": {"lr": 1e-2, "grad_clip": 1.0},
        "loop": {"train_batch_size": 2, "epochs": 100, "max_steps": 20, "micro_batch_size": 16},
        "checkpointing": {"ckpt_interval": 0, "hf_save_interval": 0, "save_final": False},
        "seed": 0,
    })
    result = train(cfg, tmp_path / "run")
    curve = [r["reward/avg_raw_reward"] for r in result.records]
    print("reward curve:", " ".join(f"{r:.2f}" for r in curve))
    assert len(curve) == 20
    first, last = sum(curve[:3]) / 3, sum(curve[-3:]) / 3
    assert last > first + 0.2, curve
