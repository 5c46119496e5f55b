"""``generator.weight_sync: auto`` resolved from a node probe: NCCL where every server is on this node
and CUDA, NCCL and vLLM's transfer are here, disk otherwise (forced probes); explicit values winning;
which hosts are this machine (real lookups); the seed preset's resolved config, the run log's words
and the plan's bytes; the dry-run's rows (real preflight)."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.inference.config import VLLMGenerator
from swerl.trainer.config import load_train_config
from swerl.trainer.setup.auto import resolve_auto
from swerl.trainer.setup.plan import make_plan
from swerl.trainer.setup.sync_auto import (choose_weight_sync, forced_sync_probe, is_this_machine, probe_sync,
                                           transfer_api_present)

ROOT = Path(__file__).resolve().parents[3]
SEED_YAML = ROOT / "examples" / "rloo-seqnorm-tis-qwen3-8b.yaml"
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
QWEN3_8B = {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "tie_word_embeddings": False}
GPU_NODE = forced_sync_probe()  # CUDA, NCCL and vLLM's transfer module; every server on this node
STARTED = VLLMGenerator(vllm_mode="servers", num_servers=1, weight_sync="auto")  # servers swerl starts
URLS = VLLMGenerator(vllm_mode="servers", server_urls=["http://gpu-node-2:8000"], weight_sync="auto")


@pytest.mark.parametrize(("probe", "gen", "expected", "because"), [
    (GPU_NODE, STARTED, "nccl", "swerl starts 1 server per rank on this node's GPUs, CUDA and NCCL here"),
    (GPU_NODE, URLS, "nccl", "every server_urls host is this machine (1 server)"),
    (forced_sync_probe(remote_hosts=("gpu-node-2",)), URLS, "disk", "server_urls host gpu-node-2 is not this machine"),
    (forced_sync_probe(multi_node=True), URLS, "disk", "server_urls shared by ranks on several nodes"),
    (forced_sync_probe(multi_node=True), STARTED, "nccl", "swerl starts 1 server per rank"),  # each on its rank's node
    (forced_sync_probe(cuda=False), STARTED, "disk", "the trainer is not on a CUDA GPU"),
    (forced_sync_probe(nccl=False), STARTED, "disk", "this torch has no NCCL"),
    (forced_sync_probe(transfer_api=False), STARTED, "disk", "the installed vLLM lacks the NCCL weight-transfer module"),
    (GPU_NODE, VLLMGenerator(weight_sync="auto"), "disk", "vllm_mode=inprocess"),
], ids=["started-gpu", "local-urls", "remote-url", "urls-multi-node", "started-multi-node", "no-cuda", "no-nccl",
        "old-vllm", "inprocess"])
def test_auto_picks_nccl_only_where_every_server_is_on_this_gpu_node(probe, gen, expected, because):
    choice = choose_weight_sync(probe, gen)
    assert choice.weight_sync == expected and because in choice.why


def test_lora_and_the_exact_schedule_sync_through_disk_on_a_gpu_node():
    assert "model.lora" in choose_weight_sync(GPU_NODE, STARTED, lora=True).why
    exact = choose_weight_sync(GPU_NODE, STARTED, exact_schedule=True)
    assert exact.weight_sync == "disk" and "loop.exact_staleness" in exact.why


def test_an_explicit_weight_sync_always_wins():
    assert choose_weight_sync(forced_sync_probe(cuda=False), STARTED.model_copy(update={"weight_sync": "nccl"})) is None
    assert choose_weight_sync(GPU_NODE, STARTED.model_copy(update={"weight_sync": "disk"})) is None


def test_loopback_and_this_hosts_name_are_this_machine_a_foreign_address_is_not():
    assert is_this_machine("127.0.0.1") and is_this_machine("localhost") and is_this_machine(socket.gethostname())
    assert not is_this_machine("192.0.2.1")  # TEST-NET-1: never an address of this machine
    assert not is_this_machine("no-such-host.invalid")  # does not resolve


def test_the_probe_looks_up_server_hosts_for_a_gpu_trainer_only():
    gen = VLLMGenerator(vllm_mode="servers", server_urls=["http://127.0.0.1:8000", "http://192.0.2.1:8001",
                                                          "http://192.0.2.1:8002"], weight_sync="auto")
    assert probe_sync(gen, "cuda", (1, 1)).remote_hosts == ("192.0.2.1",)  # once, in order
    assert probe_sync(gen, "cpu", (1, 1)).remote_hosts == ()  # a CPU trainer syncs through disk anyway
    assert probe_sync(gen, "cpu", (8, 4)).multi_node and not probe_sync(gen, "cpu", (4, 4)).multi_node


def test_the_transfer_module_is_found_without_importing_vllm(tmp_path, monkeypatch):
    package = tmp_path / "vllm"
    (package / "distributed" / "weight_transfer").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('imported')\n")  # finding it must not import it
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    assert not transfer_api_present()
    (package / "distributed" / "weight_transfer" / "nccl_engine.py").write_text("")
    assert transfer_api_present()


def _seed(tmp_path: Path, *overrides: str):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    return load_train_config(SEED_YAML, [f"model.path={tmp_path}", *overrides])


def test_the_seed_preset_resolves_to_nccl_on_its_gpu_node_and_says_why(tmp_path):
    seed = _seed(tmp_path)
    assert seed.generator.weight_sync == "auto"
    resolution = resolve_auto(seed, sync_probe=GPU_NODE)
    assert resolution.config.generator.weight_sync == "nccl" and resolution.probe is None  # no matmul probe needed
    assert resolution.lines() == ["auto: generator.weight_sync -> nccl (swerl starts 1 server per rank on this node's "
                                  "GPUs, CUDA and NCCL here: the owner rank broadcasts from GPU memory, no disk)"]
    assert resolution.as_dict()["generator.weight_sync"] == "nccl"
    row = dict(make_plan(resolution.config, 5000, world_size=4).placement)["weight sync / step"]
    assert row.startswith("16.4 GB bfloat16 weights per engine; NCCL broadcast from each server's owner rank's GPU, "
                          "nothing on disk (through disk: 16.4 GB written")  # 8.19 B x 2 B


def test_the_seed_on_another_node_syncs_through_disk_with_its_bytes_in_the_plan(tmp_path):
    seed = _seed(tmp_path, "generator.server_urls=[http://gpu-node-2:8000]",
                 "generator.weight_sync_address=10.0.0.7")
    resolution = resolve_auto(seed, sync_probe=forced_sync_probe(remote_hosts=("gpu-node-2",)))
    gen = resolution.config.generator
    assert (gen.weight_sync, gen.weight_sync_address) == ("disk", None)  # the address is read by nccl only
    assert "gpu-node-2 is not this machine" in resolution.lines()[0]
    row = dict(make_plan(resolution.config, 5000, world_size=4).placement)["weight sync / step"]
    assert row == ("16.4 GB bfloat16 weights per engine; through disk: 16.4 GB written to weight_sync_dir, one shard "
                   "per rank of 4.1 GB; 16.4 GB read back by each engine, 16.4 GB in all over 1 engine on 4 ranks")


def test_an_unresolved_plan_names_both_paths(tmp_path):
    row = dict(make_plan(_seed(tmp_path), 5000, world_size=4).placement)["weight sync / step"]
    assert "weight_sync auto, chosen when the run starts" in row
    assert "16.4 GB read back by each engine, 65.5 GB in all over 4 engines on 4 ranks" in row


@pytest.mark.docker  # the dry run is a preflight: it asks Docker for the tasks' images
def test_dry_run_prints_the_sync_choice_and_its_reason(tmp_path, monkeypatch):
    """The CPU demo on vLLM servers with ``weight_sync: auto``: this CPU machine's real probe picks
    disk; a GPU node's (forced) picks nccl. The plan and --json carry the choice and why."""
    from swerl.cli import app
    from swerl.trainer.setup import auto

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "tie_word_embeddings": True}))
    args = ["train", str(DEMO_YAML), "--dry-run", "-o", str(tmp_path / "run"), "--json", str(tmp_path / "plan.json")]
    for value in [f"data.tasks={FIXTURE_TASKS}", "data.names=null", "loop.train_batch_size=1",
                  f"model.path={tmp_path / 'model'}", "model.dtype=float32", "generator.backend=vllm",
                  "generator.vllm_mode=servers", "generator.weight_sync=auto", "generator.max_model_len=1024",
                  "loop.exact_staleness=false"]:
        args += ["--set", value]

    def flat(output: str) -> str:
        return " ".join(output.translate({ord(c): " " for c in "│┃┏┓┗┛┡┩└┘━─┳╇┴"}).split())

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "auto: generator.weight_sync disk (the trainer is not on a CUDA GPU" in flat(result.output)
    # 106,816 parameters (embedding 512 x 64 tied; 2 layers of 12,288 attention + 24,576 MLP + 128 norm; 64) x 2 B
    assert "through disk: 214 kB written to weight_sync_dir; 214 kB read back by each engine" in flat(result.output)
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert saved["config"]["generator"]["weight_sync"] == "disk" and saved["auto"]["generator.weight_sync"] == "disk"
    monkeypatch.setattr(auto, "probe_sync", lambda gen, device: GPU_NODE)  # as on a GPU node
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "auto: generator.weight_sync nccl (swerl starts 1 server per rank on this node's GPUs" in flat(result.output)
    assert "NCCL broadcast from each server's owner rank's GPU, nothing on disk" in flat(result.output)
