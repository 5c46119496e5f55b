"""examples/ablation: the arms are the 2 x 2 grid (reduction x TIS); sized by size.args each arm
trains at least 20 steps and is evaluated before and after on a pinned held-out set disjoint from
its training tasks, with the same eval seed in every arm (so `swerl compare` pairs them)."""

from __future__ import annotations

from pathlib import Path

from swerl.trainer.config import load_train_config

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "examples" / "ablation"


def _lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_the_arms_are_the_reduction_x_tis_grid_sized_to_answer():
    size = ["data.tasks=runs/humaneval-tasks", "eval.tasks=runs/humaneval-tasks", *_lines(HERE / "size.args")]  # as run.sh
    arms = [line.split() for line in _lines(HERE / "arms.txt")]
    configs = {name: load_train_config(ROOT / "examples" / "humaneval-smollm2-cpu.yaml", size + [
        f"algorithm.loss_reduction={reduction}", f"algorithm.use_tis={tis}"]) for name, reduction, tis in arms}
    grid = {(c.algorithm.loss_reduction, c.algorithm.use_tis) for c in configs.values()}
    assert grid == {(r, t) for r in ("sequence_mean", "seq_mean_token_sum_norm_global") for t in (True, False)}
    for cfg in configs.values():
        assert cfg.loop.max_steps >= 20 and cfg.loop.epochs * (len(cfg.data.names) // cfg.loop.train_batch_size) >= 20
        assert cfg.eval is not None and cfg.eval.before_train and cfg.eval.interval == 0  # before and after
        assert not set(cfg.eval.names) & set(cfg.data.names)  # held out
        assert cfg.eval.seed == 0 and cfg.checkpointing.hf_save_interval == 5  # steps 10, 15, 20 are candidates
