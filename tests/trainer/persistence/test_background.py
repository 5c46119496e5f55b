"""Background checkpoints and exports (``checkpointing.async_save``): what is written is the state
at the save even when training mutates the live tensors before the write runs; nothing is
committed before the write is on disk; writes commit in the order they started; a failed write
stays uncommitted; 2 gloo ranks save in the background while training on and resume bit for bit;
``auto`` follows the device."""

from __future__ import annotations

import copy
import logging
import sys
import threading
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint import filesystem

from swerl.trainer.config import CheckpointConfig
from swerl.trainer.distributed import DistInfo
from swerl.trainer.persistence import checkpoint as ckpt
from swerl.trainer.persistence import hf_export
from swerl.trainer.persistence.background import BackgroundWrites, resolve_async_save
from swerl.trainer.step.update import train_on_batch

from .._support import build_tiny_model, build_tiny_tokenizer
from .test_checkpoint import ALGO, SETTINGS, batch, setup

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1]))
from torchrun import run_two_ranks  # noqa: E402


@pytest.fixture
def held_dcp_write(monkeypatch):
    """DCP's shard write (in its thread) waits until the returned event is set."""
    release, real = threading.Event(), filesystem.FileSystemWriter.write_data

    def write_data(self, *args, **kwargs):
        assert release.wait(60), "the test never released the write"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(filesystem.FileSystemWriter, "write_data", write_data)
    return release


def start(run_dir: Path, step: int, model, opt, sched) -> ckpt.PendingCheckpoint:
    return ckpt.start_checkpoint(run_dir, step, model, opt, sched, {"sampler": {"epoch": 0}}, "seed: 0\n", DistInfo(),
                                 background=True)


def test_background_checkpoint_holds_the_state_at_the_save_and_resumes_bit_for_bit(tmp_path, held_dcp_write):
    model, opt, sched = setup()
    train_on_batch(model, opt, sched, batch(1), ALGO, SETTINGS, DistInfo())
    at_save = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
    pending = start(tmp_path, 1, model, opt, sched)
    # An optimizer step right away, before the write has read a byte: it must not reach the checkpoint.
    train_on_batch(model, opt, sched, batch(2), ALGO, SETTINGS, DistInfo())
    assert not torch.equal(model.state_dict()["lm_head.weight"], at_save[0]["lm_head.weight"])
    held_dcp_write.set()
    pending.finish()

    model2, opt2, sched2 = setup(seed=99)
    ckpt.load_checkpoint(ckpt.resolve_resume(tmp_path, "latest"), model2, opt2, sched2, DistInfo())
    for name, value in at_save[0].items():
        assert torch.equal(model2.state_dict()[name], value), name
    for index, state in at_save[1]["state"].items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt2.state_dict()["state"][index][key], state[key]), (index, key)
    # and training goes on from there exactly as the sync checkpoint's test does
    model3, opt3, sched3 = setup()
    train_on_batch(model3, opt3, sched3, batch(1), ALGO, SETTINGS, DistInfo())
    assert train_on_batch(model2, opt2, sched2, batch(2), ALGO, SETTINGS, DistInfo()) == \
        train_on_batch(model3, opt3, sched3, batch(2), ALGO, SETTINGS, DistInfo())


def test_background_checkpoint_is_committed_only_once_written(tmp_path, held_dcp_write):
    model, opt, sched = setup()
    pending = start(tmp_path, 3, model, opt, sched)
    root = tmp_path / ckpt.CKPT_DIR
    assert (root / ".tmp-global_step_3" / "trainer_state.json").is_file()  # the small files are written at once
    assert not (root / "global_step_3").exists() and not (root / ckpt.LATEST_FILE).exists()
    assert ckpt.resolve_resume(tmp_path, "latest") is None
    held_dcp_write.set()
    assert pending.finish() == root / "global_step_3"
    assert (root / ckpt.LATEST_FILE).read_text() == "3\n" and not (root / ".tmp-global_step_3").exists()
    assert ckpt.resolve_resume(tmp_path, "latest") == root / "global_step_3"


def test_writes_commit_in_start_order_each_before_the_next_of_its_kind(tmp_path):
    model, opt, sched = setup()
    tok, writes = build_tiny_tokenizer(), BackgroundWrites()
    # step 2: export, then checkpoint (the loop's commit order), both in the background
    writes.add(hf_export.start_export(tmp_path, 2, model, tok, DistInfo(), background=True))
    writes.add(start(tmp_path, 2, model, opt, sched))
    # step 3: the previous export is committed before the next starts; the checkpoint started after it waits
    assert writes.finish("export") == [tmp_path / "exports" / "global_step_2"]
    writes.add(hf_export.start_export(tmp_path, 3, model, tok, DistInfo(), background=True))
    assert writes.pending() == [("checkpoint", 2), ("export", 3)]
    assert not (tmp_path / ckpt.CKPT_DIR / "global_step_2").exists()

    assert writes.finish("checkpoint") == [tmp_path / ckpt.CKPT_DIR / "global_step_2"]
    assert writes.pending() == [("export", 3)] and not (tmp_path / "exports" / "global_step_3").exists()
    assert writes.finish() == [tmp_path / "exports" / "global_step_3"]
    assert (tmp_path / "exports" / "global_step_3" / "model.safetensors").is_file() and writes.pending() == []


def test_background_export_equals_the_foreground_export_of_the_state_at_the_call(tmp_path, monkeypatch):
    model, tok = build_tiny_model(16, 3), build_tiny_tokenizer()
    hf_export.export_hf(tmp_path / "fg", 5, model, tok, DistInfo())
    release, real = threading.Event(), hf_export.write_safetensors_streaming

    def held(*args, **kwargs):
        assert release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_export, "write_safetensors_streaming", held)
    pending = hf_export.start_export(tmp_path / "bg", 5, model, tok, DistInfo(), background=True)
    with torch.no_grad():  # the live fp32 weights change before the writer runs: the export must not see it
        for param in model.parameters():
            param.add_(1.0)
    assert not (tmp_path / "bg" / "exports" / "global_step_5").exists()
    release.set()
    folder = pending.finish()
    fg = tmp_path / "fg" / "exports" / "global_step_5"
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in fg.iterdir())
    for name in ("model.safetensors", "config.json", "README.md"):
        assert (folder / name).read_bytes() == (fg / name).read_bytes(), name


def test_a_failed_background_write_stays_uncommitted_and_is_logged_on_exit(tmp_path, monkeypatch, caplog):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hf_export, "write_safetensors_streaming", disk_full)
    model, tok, writes = build_tiny_model(16, 3), build_tiny_tokenizer(), BackgroundWrites()
    writes.add(hf_export.start_export(tmp_path, 4, model, tok, DistInfo(), background=True))
    with pytest.raises(OSError, match="No space left"):
        writes.finish()
    assert writes.pending() == [("export", 4)]
    with caplog.at_level(logging.WARNING):
        writes.finish_on_exit()  # the run is already ending: logged, not raised
    assert "the export of step 4 was not committed (OSError" in caplog.text and writes.pending() == []
    assert not (tmp_path / "exports" / "global_step_4").exists()
    assert (tmp_path / "exports" / ".tmp-global_step_4").is_dir()  # the next export or resume removes it


def test_two_ranks_save_in_the_background_while_training_and_resume_bit_for_bit(tmp_path):
    run_two_ranks(HERE.parent / "async_ckpt_worker.py", str(tmp_path))
    got = torch.load(tmp_path / "async.pt", weights_only=False)
    assert got["resumed"] == got["expected"]  # losses, grad norms, lr: bit for bit
    for name, value in got["at_save"].items():
        assert torch.equal(got["loaded"][name], value), name
    assert any(not torch.equal(got["after"][name], value) for name, value in got["at_save"].items())
    assert got["pending_while_training"] == [".tmp-global_step_1"]


@pytest.mark.parametrize(("setting", "device", "on"), [
    ("auto", "cuda", True), ("auto", "cpu", False), (True, "cpu", True), (False, "cuda", False)])
def test_async_save_auto_is_on_for_cuda_only_and_an_explicit_value_wins(setting, device, on):
    assert resolve_async_save(CheckpointConfig(async_save=setting).async_save, device) is on


def test_async_save_accepts_auto_true_false_only():
    assert CheckpointConfig().async_save == "auto"
    with pytest.raises(ValueError, match="async_save"):
        CheckpointConfig(async_save="sometimes")
