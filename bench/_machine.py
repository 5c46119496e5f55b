"""The machine a bench line was measured on: CPU model, its matrix/vector units, cores, load
average, and the GPU when one is used. Every figure a bench prints names it."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_words() -> str:
    """``AMD EPYC 9R14 (AVX512-BF16, no AMX), 2 cores, load 1.10``: model name, the widest bf16/AVX
    feature in /proc/cpuinfo, usable cores and the 1-minute load average."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "CPU")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    units = ("AMX" if "amx_bf16" in flags else "no AMX",
             "AVX512-BF16" if "avx512_bf16" in flags else ("AVX512" if "avx512f" in flags else
                                                          ("AVX2" if "avx2" in flags else "no AVX2")))
    cores = len(os.sched_getaffinity(0))
    return f"{model} ({units[1]}, {units[0]}), {cores} cores, load {os.getloadavg()[0]:.2f}"


def machine_words(device: str = "cpu") -> str:
    """:func:`cpu_words`, preceded by the GPU's name on ``cuda``."""
    if device.startswith("cuda"):
        import torch

        return f"{torch.cuda.get_device_name()} + {cpu_words()}"
    return cpu_words()
