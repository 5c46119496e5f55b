"""The trainer's sync + parity probe (``swerl.trainer.rollouts.generator``) against engines that honour the
vLLM engine contract by reading the safetensors folder into their own copy of the model: a
faithful engine agrees with the trainer after a sync; one that ignores the folder stops the run.
The sync is chosen by the backend's type, never by its attributes."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from swerl.errors import InferenceError
from swerl.inference.engines.engine_pool import EnginePool
from swerl.inference.backends.hf import HFBackend
from swerl.trainer.config import TrainConfig
from swerl.trainer.distributed import DistInfo
from swerl.inference.weight_sync.disk import DiskReload
from swerl.inference.weight_sync.module_share import ModuleShare
from swerl.trainer.rollouts.generator import attach_sync, publish_weights


class DiskEngine:
    """An engine with its own weights that it replaces only from the sync folder."""

    def __init__(self, model: torch.nn.Module, tokenizer, faithful: bool = True) -> None:
        self.hf = HFBackend(copy.deepcopy(model), tokenizer)
        self.faithful, self.weight_version = faithful, 0

    def generate(self, prompts, sampling, seeds=None):
        return [g.model_copy(update={"weight_version": self.weight_version})
                for g in self.hf.generate(prompts, sampling, seeds=seeds)]

    def check_reload_api(self) -> None:
        pass

    def reload_weights(self, folder, version, repack_tied=True):
        if self.faithful:
            for shard in sorted(Path(folder).glob("*.safetensors")):
                self.hf.model.load_state_dict(load_file(shard), strict=False)
        self.weight_version = version


def config() -> TrainConfig:
    return TrainConfig(data={"tasks": "unused"}, agent={"temperature": 0.7, "limits": {"context_window_tokens": 256,
                       "max_new_tokens_per_turn": 64}},
                       generator={"backend": "vllm", "dtype": "float32", "max_model_len": 256, "probe_tokens": 8})


def train_a_little(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * parameter.abs().mean() * torch.randn_like(parameter))


def test_faithful_engines_agree_after_a_sync_and_carry_the_version(tiny_model, tiny_tokenizer, tmp_path) -> None:
    pool = EnginePool([DiskEngine(tiny_model, tiny_tokenizer), DiskEngine(tiny_model, tiny_tokenizer)], tiny_tokenizer)
    generator = attach_sync(pool, config(), tiny_model, tmp_path, DistInfo())
    assert isinstance(generator.sync, DiskReload) and generator.sync.probe_engines() == pool.engines
    train_a_little(tiny_model)
    metrics = publish_weights(generator, tiny_model, config(), DistInfo(), version=3)
    assert metrics["inference/logprob_diff_max"] < 1e-4 and metrics["timing/weight_sync_s"] >= 0
    folders = list((tmp_path / "weight_sync").iterdir())
    assert pool.weight_version == 3 and [f.name[:8] for f in folders] == ["v000003-"]
    assert [p.name for p in folders[0].iterdir()] == ["model-00001-of-00001.safetensors"]
    publish_weights(generator, tiny_model, config(), DistInfo(), version=4)  # a fresh folder; the old one goes
    assert [f.name[:8] for f in (tmp_path / "weight_sync").iterdir()] == ["v000004-"]


def test_the_hf_backend_gets_the_module_share_and_other_types_none(tiny_model, tiny_tokenizer, tmp_path) -> None:
    generator = attach_sync(HFBackend(tiny_model, tiny_tokenizer), config(), tiny_model, tmp_path, DistInfo())
    assert isinstance(generator.sync, ModuleShare) and not generator.sleeps_during_update
    assert publish_weights(generator, tiny_model, config(), DistInfo(), 2)["inference/logprob_diff_max"] < 1e-5
    assert generator.backend.weight_version == 2
    with pytest.raises(TypeError, match="no weight sync for a generator backend of type DiskEngine"):
        attach_sync(DiskEngine(tiny_model, tiny_tokenizer), config(), tiny_model, tmp_path, DistInfo())


def test_an_engine_that_keeps_old_weights_stops_the_run(tiny_model, tiny_tokenizer, tmp_path) -> None:
    pool = EnginePool([DiskEngine(tiny_model, tiny_tokenizer), DiskEngine(tiny_model, tiny_tokenizer, faithful=False)],
                      tiny_tokenizer)
    train_a_little(tiny_model)
    with pytest.raises(InferenceError, match=r"rank 0: logprob probe: engine 1 \(weight version 3\)"):
        publish_weights(attach_sync(pool, config(), tiny_model, tmp_path, DistInfo()), tiny_model, config(),
                        DistInfo(), version=3)
