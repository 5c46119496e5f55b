"""Checkpoints: exact resume of the update, atomic saves (kill -9 mid-save), retention, HF exports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from swerl.errors import ConfigError
from swerl.rl.advantages import group_index
from swerl.rl.config import AlgorithmConfig
from swerl.rl.loss import compute_advantages
from swerl.trainer.persistence import checkpoint as ckpt
from swerl.trainer.persistence import hf_export
from swerl.trainer.step.batch import row_from_trajectory
from swerl.trainer.config import OptimizerConfig
from swerl.trainer.distributed import DistInfo
from swerl.trainer.step.optim import build_optimizer
from swerl.trainer.step.update import UpdateSettings, train_on_batch

from .._support import build_tiny_model, build_tiny_tokenizer, make_trajectories

HERE = Path(__file__).parent
ALGO = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2)
SETTINGS = UpdateSettings(temperature=0.7, rows_per_mini_batch=4, micro_batch_size=2, update_epochs=2)
OPT = OptimizerConfig(lr=1e-2, schedule="cosine", warmup_steps=2, grad_clip=0.5)


def batch(seed: int):
    trajs = make_trajectories(num_groups=2, group_size=4, seed=seed)
    trajs[0] = trajs[0].model_copy(update={"reward": 1.0})
    trajs[5] = trajs[5].model_copy(update={"reward": 0.0})
    trajs[4] = trajs[4].model_copy(update={"reward": 1.0})
    rewards = torch.tensor([t.reward for t in trajs])
    adv, _ = compute_advantages(ALGO, rewards, group_index([t.group_id for t in trajs]), None)
    return [row_from_trajectory(t, float(a)) for t, a in zip(trajs, adv)]


def setup(seed: int = 0):
    model = build_tiny_model(16, seed)
    optimizer, scheduler = build_optimizer(model, OPT, total_optimizer_steps=20)
    return model, optimizer, scheduler


def save(run_dir: Path, step: int, model, optimizer, scheduler, keep_last=None, protect=frozenset()):
    return ckpt.save_checkpoint(run_dir, step, model, optimizer, scheduler, {"sampler": {"epoch": 0}},
                                "seed: 0\n", DistInfo(), keep_last, protect)


def test_resume_gives_identical_losses_and_weights(tmp_path):
    model, opt, sched = setup()
    train_on_batch(model, opt, sched, batch(1), ALGO, SETTINGS, DistInfo())
    save(tmp_path, 1, model, opt, sched)
    torch.rand(3)  # RNG consumed after the save must be restored by the load
    expected = [train_on_batch(model, opt, sched, batch(s), ALGO, SETTINGS, DistInfo()) for s in (2, 3)]

    model2, opt2, sched2 = setup(seed=99)  # different initial weights: everything comes from the checkpoint
    state = ckpt.load_checkpoint(ckpt.resolve_resume(tmp_path, "latest"), model2, opt2, sched2, DistInfo())
    assert state["global_step"] == 1 and state["sampler"] == {"epoch": 0}
    got = [train_on_batch(model2, opt2, sched2, batch(s), ALGO, SETTINGS, DistInfo()) for s in (2, 3)]
    assert got == expected  # bit-for-bit: loss, grad norm, lr, clip fraction, TIS figures
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)
    assert expected[1]["lr"] != expected[0]["lr"]  # the schedule state moved on and was restored


CRASH_SCRIPT = textwrap.dedent("""
    import sys, time, torch
    sys.path.insert(0, {tests_dir!r})
    from trainer.persistence.test_checkpoint import setup, save
    from swerl.trainer.persistence import checkpoint as ckpt
    run_dir = __import__("pathlib").Path(sys.argv[1])
    model, opt, sched = setup()
    save(run_dir, 1, model, opt, sched)
    real_save = ckpt.dcp.save
    def slow_save(*a, **k):  # the shards are written, the folder is not renamed yet
        real_save(*a, **k)
        print("MID-SAVE", flush=True)
        time.sleep(600)
    ckpt.dcp.save = slow_save
    save(run_dir, 2, model, opt, sched)
""")


def test_kill_9_mid_save_leaves_previous_checkpoint_loadable(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(CRASH_SCRIPT.format(tests_dir=str(HERE.parents[1])))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "MID-SAVE"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    root = tmp_path / "run" / ckpt.CKPT_DIR
    assert (root / ".tmp-global_step_2" / ckpt.STATE_DIR / ".metadata").exists()  # the half-written step 2
    assert [s for s, _ in ckpt.list_checkpoints(root)] == [1]
    latest = ckpt.resolve_resume(tmp_path / "run", "latest")
    assert latest.name == "global_step_1"
    model, opt, sched = setup(seed=5)
    assert ckpt.load_checkpoint(latest, model, opt, sched, DistInfo())["global_step"] == 1
    save(tmp_path / "run", 2, model, opt, sched)  # the next save sweeps the stale temp folder
    assert not (root / ".tmp-global_step_2").exists()
    assert ckpt.resolve_resume(tmp_path / "run", "latest").name == "global_step_2"


def test_keep_last_never_deletes_newest_or_protected(tmp_path):
    model, opt, sched = setup()
    for step in range(1, 6):
        save(tmp_path, step, model, opt, sched, keep_last=2, protect=frozenset({1}))
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / ckpt.CKPT_DIR)] == [1, 4, 5]
    assert ckpt.prune_checkpoints(tmp_path / ckpt.CKPT_DIR, keep_last=1) == [1, 4]
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / ckpt.CKPT_DIR)] == [5]


def test_latest_falls_back_when_pointer_is_missing_and_bad_path_is_an_error(tmp_path):
    model, opt, sched = setup()
    for step in (2, 4):
        save(tmp_path, step, model, opt, sched)
    (tmp_path / ckpt.CKPT_DIR / ckpt.LATEST_FILE).unlink()
    assert ckpt.resolve_resume(tmp_path, "latest").name == "global_step_4"
    assert ckpt.resolve_resume(tmp_path / "fresh", "latest") is None
    with pytest.raises(ConfigError, match="not a checkpoint folder"):
        ckpt.resolve_resume(tmp_path, str(tmp_path / "nowhere"))


def test_single_process_dcp_is_quiet_without_a_process_wide_filter(tmp_path):
    import warnings

    model, opt, sched = setup()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save(tmp_path, 1, model, opt, sched)
        ckpt.load_checkpoint(tmp_path / ckpt.CKPT_DIR / "global_step_1", model, opt, sched, DistInfo())
        ckpt.read_model_state(tmp_path / ckpt.CKPT_DIR / "global_step_1")
        warnings.warn("torch.distributed is disabled (raised outside a DCP call)", UserWarning)
    assert [str(w.message) for w in caught if "torch.distributed" in str(w.message)] == [
        "torch.distributed is disabled (raised outside a DCP call)"]
    # A background write (test_background.py) may leave a filter, scoped to DCP's own modules only.
    assert not [f for f in warnings.filters if f[1] is not None and "torch.distributed" in f[1].pattern
                and (f[3] is None or f[3].pattern != ckpt.DCP_MODULES)]


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied-embeddings"])
def test_hf_export_loads_with_transformers(tmp_path, tied):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok = build_tiny_model(16, 3, tie_word_embeddings=tied), build_tiny_tokenizer()
    path = hf_export.export_hf(tmp_path, 5, model, tok, DistInfo())
    assert path == tmp_path / "exports" / "global_step_5" and (path / "model.safetensors").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(path)
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    tok2 = AutoTokenizer.from_pretrained(path)
    msgs = [{"role": "user", "content": "Write MAGIC"}]
    assert tok2.apply_chat_template(msgs, add_generation_prompt=True) == tok.apply_chat_template(
        msgs, add_generation_prompt=True)
