"""examples/ablation: the four arms are the 2 x 2 grid (reduction x TIS) and each is a valid
config of the shrunk CPU default (what `make ablation` trains)."""

from __future__ import annotations

from pathlib import Path

from swerl.trainer.config import load_train_config

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "examples" / "ablation"


def _lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_the_arms_are_the_reduction_x_tis_grid_on_the_shrunk_default():
    shrink = _lines(HERE / "shrink.args")
    arms = [line.split() for line in _lines(HERE / "arms.txt")]
    configs = {name: load_train_config(ROOT / "examples" / "humaneval-smollm2-cpu.yaml", shrink + [
        f"algorithm.loss_reduction={reduction}", f"algorithm.use_tis={tis}"]) for name, reduction, tis in arms}
    grid = {(c.algorithm.loss_reduction, c.algorithm.use_tis) for c in configs.values()}
    assert grid == {(r, t) for r in ("sequence_mean", "seq_mean_token_sum_norm_global") for t in (True, False)}
    for cfg in configs.values():
        assert cfg.loop.max_steps == 3 and cfg.loop.train_batch_size * cfg.algorithm.n_samples_per_prompt == 8
        assert cfg.checkpointing.hf_save_interval == 1  # steps 2 and 3 are select-checkpoint candidates
