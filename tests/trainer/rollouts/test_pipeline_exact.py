"""The exact schedule of the rollout pipeline (k = 1, ``loop.exact_staleness`` on) on real parts:
the tiny model in fp32, the HF generator one prompt per forward, the learning tasks in real Docker
sandboxes. Batch s is sampled by version max(s - 2, 0) whatever the timing: two seeded runs (one
with a slowed trainer) give the same samples, records and weights; a run resumed from a mid-run
checkpoint (which saved the batch the producer had collected) repeats the rest bit for bit."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import pytest
import torch

from swerl.trainer.loop import train
from swerl.trainer.persistence import checkpoint as ckpt

from ..test_loop import records, tiny_config
from .test_pipeline import SAMPLE_KEYS, dumped, untimed

pytestmark = [pytest.mark.docker, pytest.mark.slow]

K, STEPS, RESUME_AT = 1, 4, 2


def samples(run_dir: Path) -> dict[int, list[dict]]:
    """Per step, what each episode sampled (ids, log-probs, versions) and scored."""
    return {step: [{k: r[k] for k in SAMPLE_KEYS} for r in rows] for step, rows in dumped(run_dir).items()}


def weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return ckpt.read_model_state(run_dir / "checkpoints" / f"global_step_{step}")


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    """Two seeded 4-step runs at k = 1: ``plain``, and ``slowed``, whose update sleeps 2 s (the
    producer is then far ahead of the trainer, which under a timing-driven schedule changes the
    versions that sample each batch)."""
    import swerl.trainer.loop as loop

    root = tmp_path_factory.mktemp("exact")
    cfg = tiny_config(tiny_model_dir, max_steps=STEPS, max_staleness_steps=K)
    assert cfg.loop.exact_staleness and cfg.model.dtype == "float32"
    train(cfg, root / "plain")
    real_update = loop.train_on_batch

    def slow_update(*args, **kwargs):
        time.sleep(2.0)
        return real_update(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "train_on_batch", slow_update)
        train(cfg, root / "slowed")
    return {"plain": root / "plain", "slowed": root / "slowed", "root": root, "cfg": cfg}


def test_batch_s_is_sampled_by_version_s_minus_2_and_staleness_is_exactly_k(runs):
    for step, rows in samples(runs["plain"]).items():
        assert [r["turn_weight_versions"] for r in rows] == [[max(step - 1 - K, 0)]] * len(rows), step
    recs = records(runs["plain"])
    assert [r["global_step"] for r in recs] == list(range(1, STEPS + 1))
    assert [r["async/staleness_mean"] for r in recs] == [0.0] + [float(K)] * (STEPS - 1)
    assert [r["async/staleness_max"] for r in recs] == [0.0] + [float(K)] * (STEPS - 1)


def test_two_seeded_runs_repeat_bit_for_bit_whatever_the_timing(runs):
    plain, slowed = runs["plain"], runs["slowed"]
    assert samples(slowed) == samples(plain)
    assert untimed(slowed) == untimed(plain)
    assert same_weights(weights(slowed, STEPS), weights(plain, STEPS))
    assert len({r["loss/policy"] for r in records(plain)}) > 1  # the steps did train


def test_a_resume_from_a_mid_run_checkpoint_repeats_the_run_bit_for_bit(runs):
    plain = runs["plain"]
    mid = plain / "checkpoints" / f"global_step_{RESUME_AT}"
    assert (mid / ckpt.pending_file(0)).is_file()  # batch 3, sampled by version 1, saved beside step 2
    resumed = crashed_after(plain, runs["root"] / "resumed", RESUME_AT)
    result = train(runs["cfg"], resumed, resume="latest")
    assert result.steps_trained == STEPS - RESUME_AT
    assert samples(resumed) == samples(plain)
    assert untimed(resumed) == untimed(plain)
    assert same_weights(weights(resumed, STEPS), weights(plain, STEPS))


def test_a_checkpoint_without_the_next_batch_resumes_and_says_it_collects_it_again(runs, caplog):
    old = crashed_after(runs["plain"], runs["root"] / "old", RESUME_AT)
    (old / "checkpoints" / f"global_step_{RESUME_AT}" / ckpt.pending_file(0)).unlink()  # as an older swerl wrote it
    with caplog.at_level(logging.INFO, logger="swerl.trainer.loop"):
        train(runs["cfg"], old, resume="latest")
    assert "they are collected again, sampled by the resumed weights (version 2)" in caplog.text
    assert [r["global_step"] for r in records(old)] == list(range(1, STEPS + 1))
    versions = {step: {tuple(r["turn_weight_versions"]) for r in rows} for step, rows in samples(old).items()}
    assert versions[3] == {(RESUME_AT,)} and versions[4] == {(RESUME_AT,)}  # batches 3 and 4: version 2


def crashed_after(run: Path, copy: Path, step: int) -> Path:
    """A copy of ``run`` as if it had been killed right after committing ``step``."""
    shutil.copytree(run, copy)
    for later in range(step + 1, STEPS + 1):
        shutil.rmtree(copy / "checkpoints" / f"global_step_{later}")
        shutil.rmtree(copy / "exports" / f"global_step_{later}")
    (copy / "checkpoints" / "latest_ckpt_global_step.txt").write_text(f"{step}\n")
    return copy
