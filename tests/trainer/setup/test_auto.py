"""``auto`` (model.dtype, generator.backend) resolved from a machine probe: the choice on each machine
kind (forced probes with the figures measured there), explicit values winning, the fields of the
backend not chosen, the resolved config, the dry-run's words and what a resume on another machine
changed."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from swerl.errors import ConfigError
from swerl.inference.config import HFGenerator, VLLMGenerator
from swerl.inference.machine import cache_path, forced_probe
from swerl.trainer.setup.auto import changes_since, choose, config_changes, resolve_auto
from swerl.trainer.config import TrainConfig, load_train_config

ROOT = Path(__file__).resolve().parents[3]
DEMO_YAML = ROOT / "examples" / "humaneval-smollm2-cpu.yaml"
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
# 1-thread matmul GFLOP/s (fp32, bf16) measured on each machine kind of the project.
AMX = forced_probe(177.0, 1158.0, name="Intel Xeon (AMX)", flags=("amx_bf16", "avx512_bf16", "avx512f", "avx2"))
AVX2 = forced_probe(60.0, 1.0, name="AMD EPYC (AVX2 only)", flags=("avx2",))
ZEN4 = forced_probe(66.0, 190.0, name="AMD EPYC (Zen 4)", flags=("avx512_bf16", "avx512f", "avx2"))
H200 = forced_probe(60_000.0, 700_000.0, device="cuda", name="NVIDIA H200")


@pytest.mark.parametrize(("probe", "dtype", "backend", "generator_dtype"), [
    (AMX, "bfloat16", "vllm", "bfloat16"),
    (ZEN4, "bfloat16", "vllm", "bfloat16"),
    (AVX2, "float32", "hf", None),
    (H200, "bfloat16", "vllm", "bfloat16"),
], ids=["amx", "avx512-bf16", "avx2", "gpu"])
def test_auto_follows_the_measured_bf16_rate(probe, dtype, backend, generator_dtype):
    choice = choose(probe, dtype="auto", backend="auto")
    assert (choice.dtype, choice.backend, choice.generator_dtype) == (dtype, backend, generator_dtype)
    reasons = {field: why for field, _, why in choice.reasons}
    assert f"bf16 matmul {probe.bf16_speedup:.2f}x fp32 here" in reasons["model.dtype"]


def test_on_avx2_auto_is_the_fixed_cpu_default_of_before():
    """No slower than today by construction: the AVX2 choice IS today's demo (fp32 update, HF
    generate on the live module), and its HF-only threads setting stays."""
    resolved = resolve_auto(load_train_config(DEMO_YAML), AVX2).config
    before = load_train_config(DEMO_YAML, ["model.dtype=float32", "generator.backend=hf"])
    assert resolved == before and resolved.generator.num_threads == 1


def test_an_explicit_value_always_wins():
    choice = choose(AMX, dtype="float32", backend="hf")
    assert (choice.dtype, choice.backend, choice.reasons) == ("float32", "hf", ())
    choice = choose(AVX2, dtype="bfloat16", backend="auto")
    assert (choice.dtype, choice.backend) == ("bfloat16", "hf")
    assert choose(AMX, dtype="auto", backend="auto", generator_dtype="float32").generator_dtype is None


def test_without_vllm_or_with_fsdp():
    assert choose(AMX, dtype="auto", backend="auto", vllm_installed=False).backend == "hf"
    assert choose(AVX2, dtype="auto", backend="auto", fsdp=True).backend == "vllm"  # a shard cannot generate
    assert choose(AVX2, dtype="auto", backend="auto", fsdp=True).generator_dtype == "float32"
    with pytest.raises(ConfigError, match="model.fsdp with generator.backend=auto needs vLLM"):
        choose(AVX2, dtype="auto", backend="auto", fsdp=True, vllm_installed=False)


def test_cpu_flags_are_a_hint_the_measurement_overrules():
    looks_fast = forced_probe(60.0, 1.0, flags=("avx512_bf16",))  # a flag, but no fast bf16 kernel measured
    choice = choose(looks_fast, dtype="auto", backend="auto")
    assert choice.dtype == "float32" and "the CPU flags (AVX512-BF16, no AMX) suggest a bf16 unit" in choice.reasons[0][2]
    assert "flags" not in choose(ZEN4, dtype="auto", backend="auto").reasons[0][2]  # they agree: no word


@pytest.mark.parametrize(("probe", "kind"), [(AMX, VLLMGenerator), (AVX2, HFGenerator)], ids=["amx", "avx2"])
def test_auto_resolves_to_exactly_one_backend_config(probe, kind):
    """On each CPU kind (a forced probe) the resolved generator is that backend's own model, the
    chosen section of the auto config, with no key of the other backend or of the auto form."""
    demo = load_train_config(DEMO_YAML)
    generator = resolve_auto(demo, probe).config.generator
    assert type(generator) is kind
    chosen = demo.generator.candidate(generator.backend).model_dump(exclude_unset=True)
    assert generator.model_dump(include=set(chosen)) == chosen  # the demo's hf section, when hf
    dumped = yaml.safe_load(resolve_auto(demo, probe).config.to_yaml())["generator"]
    assert set(dumped) == set(kind.model_fields)


def test_vllm_chosen_records_the_resolved_values(tmp_path):
    resolution = resolve_auto(load_train_config(DEMO_YAML), AMX)
    cfg = resolution.config
    assert (cfg.model.dtype, cfg.generator.backend, cfg.generator.dtype) == ("bfloat16", "vllm", "bfloat16")
    dumped = yaml.safe_load(cfg.to_yaml())  # what RUN_DIR/config.yaml holds: no auto left, and it loads again
    assert (dumped["model"]["dtype"], dumped["generator"]["backend"]) == ("bfloat16", "vllm")
    (tmp_path / "config.yaml").write_text(cfg.to_yaml())
    assert load_train_config(tmp_path / "config.yaml") == cfg
    lines = resolution.lines()
    assert lines[0].startswith("auto: machine: Intel Xeon (AMX) (AVX512-BF16, AMX): matmul on 1 thread fp32 177 GFLOP/s")
    assert any(line.startswith("auto: generator.backend -> vllm (") for line in lines)
    assert lines[-1].startswith("auto: generator.dtype -> bfloat16 (")


def test_a_candidate_that_breaks_a_rule_is_refused_on_every_machine():
    """Each auto section is checked as its backend's config at load, before any probe."""
    with pytest.raises(ConfigError, match=r"generator.vllm.max_model_len=512 is below agent.limits.context_window_tokens"
                                          r"=1024: raise generator.vllm.max_model_len"):
        load_train_config(DEMO_YAML, ["generator.vllm.max_model_len=512"])


def test_a_resolution_that_breaks_a_rule_names_what_auto_chose():
    cfg = load_train_config(DEMO_YAML, ["algorithm.sampling_support=replay", "agent.top_k=20"])
    assert resolve_auto(cfg, AVX2).config.generator.backend == "hf"  # hf returns each kept set
    with pytest.raises(ConfigError, match=r"auto chose model.dtype=bfloat16, generator.backend=vllm on this machine, "
                                          r"and then algorithm.sampling_support=replay with generator.backend=vllm needs"):
        resolve_auto(cfg, AMX)


def test_a_resume_on_another_machine_says_what_changed(tmp_path):
    demo = load_train_config(DEMO_YAML)
    (tmp_path / "config.yaml").write_text(resolve_auto(demo, AMX).config.to_yaml())  # the run began on AMX
    changes = changes_since(tmp_path / "config.yaml", resolve_auto(demo, AVX2).config)  # resumed on AVX2
    assert changes == ["generator.backend: vllm -> hf", "generator.dtype: bfloat16 -> None",
                       "model.dtype: bfloat16 -> float32"]
    assert changes_since(tmp_path / "missing.yaml", demo) == []
    assert config_changes({"a": {"b": 1}}, {"a": {"b": 1, "c": [2]}}) == ["a.c: (unset) -> [2]"]


@pytest.mark.docker  # the dry run is a preflight: it asks Docker for the tasks' images
def test_dry_run_names_the_resolved_dtype_and_generator_and_why(tmp_path):
    """With the probe cached as an AVX2 machine's, `train --dry-run` prints the choice, the figures
    and the reasons, and its --json carries them; the YAML it prints is the resolved config."""
    cache = tmp_path / "cache"
    path = cache_path("cpu", cache)  # this machine's key, holding another kind's figures
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({k: v for k, v in asdict(AVX2).items() if k != "cached"}))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "tie_word_embeddings": True}))
    args = [sys.executable, "-m", "swerl.cli", "train", str(DEMO_YAML), "--dry-run", "-o", str(tmp_path / "run"),
            "--json", str(tmp_path / "plan.json"), "--set", f"data.tasks={FIXTURE_TASKS}", "--set", "data.names=null",
            "--set", "loop.train_batch_size=1", "--set", f"model.path={tmp_path / 'model'}"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env={**_env(), "SWERL_CACHE": str(cache)},
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    flat = " ".join(proc.stdout.translate({ord(c): " " for c in "│┃┏┓┗┛┡┩└┘━─┳╇┴"}).split())
    assert "auto: machine AMD EPYC (AVX2 only) (AVX2, no AMX): matmul on 1 thread fp32 60 GFLOP/s, bf16 1 GFLOP/s" in flat
    assert "auto: model.dtype float32 (bf16 matmul 0.02x fp32 here, < 1.5x" in flat
    assert "auto: generator.backend hf (bf16 matmul 0.02x fp32 here, < 1.5x: HF generate" in flat
    printed = yaml.safe_load(proc.stdout[: proc.stdout.index("run plan")])
    assert (printed["model"]["dtype"], printed["generator"]["backend"]) == ("float32", "hf")
    auto = json.loads((tmp_path / "plan.json").read_text())["auto"]
    assert (auto["model.dtype"], auto["generator.backend"], auto["bf16_speedup"]) == ("float32", "hf", pytest.approx(1 / 60))
    assert TrainConfig.model_validate(json.loads((tmp_path / "plan.json").read_text())["config"]).model.dtype == "float32"


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "SWERL_CACHE"}
