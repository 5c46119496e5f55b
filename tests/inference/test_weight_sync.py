"""The disk weight sync and the cross-rank parts of publishing weights, on 2 gloo ranks (one
torchrun launch, ``sync_worker.py``): every rank writes its own bf16 shard of the weights, cast
before the gather, into a fresh folder per version, for a replicated and an FSDP2-sharded model
alike; a sync of shared engines starts on no rank before every rank has drained; the probe's
gather neither hangs nor dilutes when one rank owns no engine, and stops every rank when one
rank's probe fails; the NCCL sync's weight source walks an FSDP2-sharded model in bf16."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from swerl.inference.weight_sync.base import owned_indices
from swerl.inference.weight_sync.disk import VERSION_NAME, untied_state_dict
from torchrun import run_two_ranks

from .conftest import build_tiny_model, build_tiny_tokenizer

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sync")
    run_two_ranks(HERE / "sync_worker.py", str(out))
    return out


def test_each_rank_writes_its_bf16_shard_into_a_fresh_folder_per_version(two_ranks) -> None:
    expected = untied_state_dict(build_tiny_model(len(build_tiny_tokenizer()), seed=3).state_dict(), torch.bfloat16)
    for name, version in (("tiny-replicated", 5), ("tiny-sharded", 7)):
        folders = list((two_ranks / name).iterdir())
        assert [f.name for f in folders] == [f"v{version:06d}-a1b2c3"] and VERSION_NAME.match(folders[0].name)
        files = sorted(p.name for p in folders[0].iterdir())
        assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        parts = [load_file(folders[0] / f) for f in files]
        assert parts[0] and parts[1] and not parts[0].keys() & parts[1].keys()  # every rank wrote a share
        written = {**parts[0], **parts[1]}
        assert written.keys() == expected.keys()
        assert all(written[k].dtype == torch.bfloat16 and torch.equal(written[k], expected[k]) for k in expected)


def test_the_nccl_source_of_a_sharded_model_gathers_bf16_full_weights_on_every_rank(two_ranks) -> None:
    """What the NCCL sync broadcasts (vLLM's transfer itself needs CUDA): one bf16 tensor per
    parameter at its full shape, in metadata order, equal to the fp32 weights cast; the shards
    stay fp32 DTensors (the cast is a copy made before each gather)."""
    pytest.importorskip("vllm")
    model = build_tiny_model(len(build_tiny_tokenizer()), seed=3)
    result = torch.load(two_ranks / "nccl_source.pt", weights_only=False)
    params = dict(model.named_parameters())
    assert [name for name, _, _ in result["meta"]] == list(params) == list(result["walked"])
    assert all(dtype == torch.bfloat16 and shape == tuple(params[name].shape) for name, dtype, shape in result["meta"])
    for name, tensor in result["walked"].items():
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, params[name].detach().to(torch.bfloat16)), name
    assert result["kept"] == {"DTensor:torch.float32"}


def test_shared_engines_are_applied_only_once_every_rank_drained_and_the_probe_gathers(two_ranks) -> None:
    result = json.loads((two_ranks / "result.json").read_text())
    (_, applied_0), (entered_1, _) = result["times"]
    assert applied_0 >= entered_1  # rank 0 waited for the rank that drained a second late
    assert result["metrics"]["inference/logprob_diff_max"] < 1e-4  # rank 0's engine only; rank 1 had none
    assert result["errors"][0].startswith("InferenceError: rank 1: engine 0: logprob probe: RuntimeError: engine exploded")
    assert result["errors"][1] == "RuntimeError: engine exploded"  # the failing rank keeps its own error


def test_a_shared_server_has_one_owner_rank() -> None:
    assert [owned_indices(3, rank, 2, shared=True) for rank in (0, 1)] == [[0, 2], [1]]
    assert owned_indices(1, 1, 4, shared=True) == []  # more ranks than servers: some own none
    assert owned_indices(2, 3, 4, shared=False) == [0, 1]  # a rank's own servers are all its own
