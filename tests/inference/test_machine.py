"""The machine probe: bf16 and fp32 matmul rates measured in well under 2 s, cached per machine
(model, flags, torch version), measured again when the cache is unreadable or a refresh is asked."""

from __future__ import annotations

import json

from swerl.inference.machine import MachineProbe, cache_path, cpu_identity, forced_probe, probe_machine


def test_the_probe_is_short_and_cached(tmp_path):
    first = probe_machine("cpu", tmp_path)
    assert not first.cached and first.probe_s < 2.0
    assert first.fp32_gflops > 0 and first.bf16_gflops > 0
    assert first.name == cpu_identity()[0] and first.threads == 1
    again = probe_machine("cpu", tmp_path)
    assert again.cached and (again.fp32_gflops, again.bf16_gflops) == (first.fp32_gflops, first.bf16_gflops)
    path = cache_path("cpu", tmp_path)
    assert path.parent == tmp_path / "machine" and json.loads(path.read_text())["torch_version"] == first.torch_version
    path.write_text("{not json")
    assert not probe_machine("cpu", tmp_path).cached  # unreadable: measured again
    assert not probe_machine("cpu", tmp_path, refresh=True).cached


def test_a_probe_describes_its_figures_and_hint():
    probe = forced_probe(177.0, 1158.0, name="Xeon", flags=("amx_bf16", "avx512_bf16"))
    assert probe.bf16_speedup == 1158.0 / 177.0
    assert probe.describe() == ("Xeon (AVX512-BF16, AMX): matmul on 1 thread fp32 177 GFLOP/s, bf16 1158 GFLOP/s = "
                                "6.54x (measured in 0.00 s, torch forced)")
    assert forced_probe(60.0, 1.0, flags=("avx2",)).hint() == "AVX2, no AMX"
    assert MachineProbe(**{**forced_probe(1.0, 2.0).__dict__, "device": "cuda", "name": "H200"}).hint() == "H200"
