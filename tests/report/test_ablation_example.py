"""examples/ablation: the arms are the 2 x 2 grid (reduction x TIS); sized by size.args each arm
trains at least 20 steps and is evaluated before and after on a pinned held-out set disjoint from
its training tasks, with the same eval seed in every arm (so `swerl compare` pairs them); the
correction family's arms are each one correction (or the KL term) on the same sizing."""

from __future__ import annotations

from pathlib import Path

from swerl.trainer.config import load_train_config

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "examples" / "ablation"


def _lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _arms(name: str) -> dict:
    """Each arm of an arms file as the config run.sh trains."""
    size = ["data.tasks=runs/humaneval-tasks", "eval.tasks=runs/humaneval-tasks", *_lines(HERE / "size.args")]
    arms = [line.split() for line in _lines(HERE / name)]
    return {arm[0]: load_train_config(ROOT / "examples" / "humaneval-smollm2-cpu.yaml", size + arm[1:])
            for arm in arms}


def test_the_arms_are_the_reduction_x_tis_grid_sized_to_answer():
    configs = _arms("arms.txt")
    grid = {(c.algorithm.loss_reduction, c.algorithm.use_tis) for c in configs.values()}
    assert grid == {(r, t) for r in ("sequence_mean", "seq_mean_token_sum_norm_global") for t in (True, False)}
    for cfg in configs.values():
        assert cfg.loop.max_steps >= 20 and cfg.loop.epochs * (len(cfg.data.names) // cfg.loop.train_batch_size) >= 20
        assert cfg.eval is not None and cfg.eval.before_train and cfg.eval.interval == 0  # before and after
        assert not set(cfg.eval.names) & set(cfg.data.names)  # held out
        assert cfg.eval.seed == 0 and cfg.checkpointing.hf_save_interval == 5  # steps 10, 15, 20 are candidates


def test_the_correction_arms_cover_the_family_once_each():
    configs = _arms("corrections.txt")
    corrections = {name: (c.algorithm.correction.level, c.algorithm.correction.mode) if c.algorithm.correction else None
                   for name, c in configs.items() if not c.algorithm.use_kl_loss}
    assert sorted(corrections.values(), key=str) == sorted(
        [None, ("token", "truncate"), ("sequence", "truncate"), ("sequence", "mask"), ("token", "mask"),
         ("geometric", "mask")], key=str)
    kl = [c.algorithm for c in configs.values() if c.algorithm.use_kl_loss]
    assert [(a.kl_estimator, a.kl_loss_coef, a.use_tis) for a in kl] == [("k3", 0.001, True)]
    assert {c.algorithm.loss_reduction for c in configs.values()} == {"seq_mean_token_sum_norm_global"}
    assert all(c.loop.max_steps >= 20 and c.eval is not None for c in configs.values())


def test_the_default_arms_train_the_generated_family_and_evaluate_a_held_out_split():
    """run.sh's defaults: the pymethods family's training split, its heldout-instance split as the
    pinned evaluation, dynamic sampling on, before and after, eval seed 0 in every arm."""
    size = ["data.tasks=runs/pymethods-learn/train", "eval.tasks=runs/pymethods-learn/heldout-instance",
            *_lines(HERE / "size-pymethods.args")]
    configs = {arm[0]: load_train_config(ROOT / "examples" / "pymethods-smollm2-cpu-learn.yaml", size + arm[1:])
               for arm in (line.split() for line in _lines(HERE / "arms.txt"))}
    assert {(c.algorithm.loss_reduction, c.algorithm.use_tis) for c in configs.values()} >= {
        ("sequence_mean", True), ("seq_mean_token_sum_norm_global", True)}
    for cfg in configs.values():
        assert cfg.algorithm.dynamic_sampling.enabled and cfg.loop.max_steps >= 10
        assert cfg.eval is not None and cfg.eval.before_train and cfg.eval.interval == 0 and cfg.eval.seed == 0
        assert cfg.eval.tasks.endswith("heldout-instance") and cfg.data.tasks.endswith("/train")
    run_sh = (HERE / "run.sh").read_text()
    assert "BASE=${BASE:-examples/pymethods-smollm2-cpu-learn.yaml}" in run_sh and "size-pymethods.args" in run_sh


def test_the_loss_arms_cover_the_four_losses_and_both_supports():
    configs = _arms("losses.txt")
    arms = {(c.algorithm.policy_loss, c.algorithm.sampling_support) for c in configs.values()}
    assert arms == {("regular", "full"), ("regular", "replay"), ("gspo", "replay"), ("cispo", "replay")}
    assert all((c.agent.top_k, c.agent.top_p, c.algorithm.use_tis) == (20, 0.95, True) for c in configs.values())
    assert all(c.loop.max_steps >= 20 and c.eval is not None for c in configs.values())
