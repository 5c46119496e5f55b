"""Tiny real parts for trainer tests: a word-level tokenizer with a chat template and a
2-layer Llama built from a config, saved as an HF folder that ``from_pretrained`` loads."""

from __future__ import annotations

from pathlib import Path


SPECIAL = ["<pad>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
WORDS = ["```python\n", "\n```", "MAGIC", "print(", ")", "pass", "x = 1", "\n", "Write", "answer"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tiny_tokenizer():
    """A word-level tokenizer: every WORDS entry is one id, any other text is ``<unk>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL)
    tok.add_tokens(WORDS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|end|>", chat_template=CHAT_TEMPLATE
    )


def build_tiny_model(vocab_size: int, seed: int = 0, tie_word_embeddings: bool = False):
    """A 2-layer Llama (hidden 32) with random weights drawn from ``seed``; ``tie_word_embeddings``
    shares the input embedding with the LM head, as SmolLM2 does."""
    from tiny_llama import build_tiny_llama

    return build_tiny_llama(vocab_size, seed, max_position_embeddings=512, tie_word_embeddings=tie_word_embeddings,
                            pad_token_id=0, eos_token_id=5, bos_token_id=None)


def save_tiny_model_dir(path: Path, seed: int = 0, tie_word_embeddings: bool = False) -> Path:
    """Write tokenizer + model to ``path`` (an HF folder) and return it."""
    tok = build_tiny_tokenizer()
    model = build_tiny_model(len(tok), seed, tie_word_embeddings)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_trajectories(num_groups: int = 2, group_size: int = 4, vocab_size: int = 16, seed: int = 0):
    """Synthetic but well-formed trajectories: unequal prompt/response lengths, observation
    tokens (loss mask 0) in the middle, 0/1 rewards, rollout log-probs near the model's."""
    import random

    from swerl.agent.trajectory import Trajectory

    rng = random.Random(seed)
    out = []
    for g in range(num_groups):
        prompt = [rng.randrange(6, vocab_size) for _ in range(rng.randint(3, 6))]
        for i in range(group_size):
            t = rng.randint(2, 9)
            response = [rng.randrange(6, vocab_size) for _ in range(t)]
            mask = [0 if 0 < k < t - 1 and k % 4 == 2 else 1 for k in range(t)]
            logprobs = [(-rng.uniform(1.5, 3.5) if m else 0.0) for m in mask]
            out.append(
                Trajectory(
                    task_name=f"task-{g}", group_id=f"g{g}", sample_index=i, prompt_ids=prompt, response_ids=response,
                    loss_mask=mask, rollout_logprobs=logprobs, reward=float(rng.random() < 0.5),
                    num_generated_tokens=sum(mask),
                )
            )
    return out


LEARNING_TASKS = Path(__file__).resolve().parents[2] / "examples" / "learning_tasks"


def tiny_run_config(model_dir: Path | str, **sections: dict) -> dict:
    """A run of the tiny model at ``model_dir`` on ``examples/learning_tasks``: single-turn, 4 new
    tokens, 2 samples per prompt, 2 steps, an HF export every step and no checkpoint; ``sections``
    replace (or add) whole top-level sections."""
    return {
        "model": {"path": str(model_dir), "device": "cpu"},
        "data": {"tasks": str(LEARNING_TASKS)},
        "agent": {"protocol": "single-turn", "temperature": 1.0,
                  "limits": {"max_new_tokens_per_turn": 4, "context_window_tokens": 256, "max_turns": 1}},
        "sandbox": {"concurrency": 4},
        "generator": {"max_batch_size": 8},
        "algorithm": {"n_samples_per_prompt": 2, "min_group_size": 2},
        "loop": {"train_batch_size": 2, "max_steps": 2, "micro_batch_size": 4},
        "checkpointing": {"ckpt_interval": 0, "hf_save_interval": 1},
        **sections,
    }


def train_tiny_run(tmp_path: Path, model_dir: Path, logging: dict) -> tuple[dict, Path, list[dict]]:
    """``swerl train`` through the CLI on :func:`tiny_run_config` with the given ``logging`` section.

    Returns: (the config as written, the run directory, its metrics.jsonl records).
    """
    import json

    import yaml
    from typer.testing import CliRunner

    from swerl.cli import app

    config = tiny_run_config(model_dir, logging=logging)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", str(path), "--run-dir", str(run_dir)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return config, run_dir, records
