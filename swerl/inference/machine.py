"""What this machine measurably does in bf16 against fp32: a short matmul probe, cached per machine.

The probe times a square matmul in float32 and in bfloat16 on one thread (CPU) or on the GPU, and
keeps the best rate of each. On a CPU with AMX or AVX512-BF16 the bf16 rate is several times the
fp32 one; on an AVX2-only CPU it is tens of times lower (no bf16 kernel, oneDNN converts). The
CPU's flags are read too, but only as a hint printed beside the figures: the choice that
``trainer/setup/auto.py`` makes rests on the measured rates, never on a model name or a flag.

The result is cached as JSON under ``<cache>/machine/<key>.json`` (``<cache>`` is
``$SWERL_CACHE`` or ``~/.cache/swerl``), the key hashing the device name, the CPU flags, the torch
version and the device kind; a file lock makes concurrent processes (torchrun ranks) probe once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PROBE_BUDGET_S = 0.25
"""Seconds of timed matmuls per dtype (after a warm-up); the whole probe stays under ~1 s."""
MAX_SIDE = 1024
"""Largest matrix side of the probe: enough for AMX's tiles to reach their rate (~1.8 ms at 1.2 TFLOP/s)."""
CACHE_VERSION = 1
"""Bumped when the probe's method changes, so older cached figures are measured again."""
HINT_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "bf16", "sve")
"""CPU flags shown as a hint (x86 ``flags``, Arm ``Features``); they never decide anything."""


@dataclass(frozen=True)
class MachineProbe:
    """Measured matmul rates of one device kind.

    Attributes:
        device: ``cpu`` or ``cuda``.
        name: CPU model name (``/proc/cpuinfo``) or GPU name.
        flags: those of :data:`HINT_FLAGS` the CPU reports (a hint only).
        torch_version: the torch that measured.
        threads: torch threads of the CPU probe (1); 0 on GPU.
        fp32_gflops: best float32 rate, GFLOP/s (2 n^3 per n x n matmul).
        bf16_gflops: best bfloat16 rate, GFLOP/s.
        probe_s: wall seconds the measurement took.
        cached: True when read from the cache instead of measured now.
    """

    device: str
    name: str
    flags: tuple[str, ...]
    torch_version: str
    threads: int
    fp32_gflops: float
    bf16_gflops: float
    probe_s: float
    cached: bool = False

    @property
    def bf16_speedup(self) -> float:
        """bf16 rate / fp32 rate (> 1: bf16 matmuls are faster here)."""
        return self.bf16_gflops / max(self.fp32_gflops, 1e-9)

    def hint(self) -> str:
        """The CPU's bf16 units in words (``AVX512-BF16, no AMX``), or the GPU's name."""
        if self.device != "cpu":
            return self.name
        units = "AMX" if "amx_bf16" in self.flags else "no AMX"
        vector = next((label for flag, label in (("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX512"),
                                                 ("avx2", "AVX2"), ("bf16", "Arm BF16")) if flag in self.flags),
                      "no AVX2")
        return f"{vector}, {units}"

    def figures(self) -> str:
        """What it measured, and whether it came from the cache."""
        where = f"{self.threads} thread" if self.device == "cpu" else "GPU"
        source = "cached" if self.cached else f"measured in {self.probe_s:.2f} s"
        return (f"matmul on {where} fp32 {self.fp32_gflops:.0f} GFLOP/s, bf16 {self.bf16_gflops:.0f} GFLOP/s = "
                f"{self.bf16_speedup:.2f}x ({source}, torch {self.torch_version})")

    def describe(self) -> str:
        """One line: the device, its hint, and :meth:`figures`."""
        what = f"{self.name} ({self.hint()})" if self.device == "cpu" else self.name
        return f"{what}: {self.figures()}"


def cpu_identity() -> tuple[str, tuple[str, ...]]:
    """(model name, hint flags) from ``/proc/cpuinfo``; ``("unknown CPU", ())`` where it is unreadable."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown CPU", ()
    fields: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or fields.get("Model name") or fields.get("CPU part") or "unknown CPU"
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return name, tuple(flag for flag in HINT_FLAGS if flag in flags)


def vllm_installed() -> bool:
    """True when the vllm package can be imported (found without importing it: that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def _matmul_gflops(dtype, device: str, budget_s: float) -> float:  # noqa: ANN001 - torch.dtype
    """Best rate of an n x n matmul: a 256 warm-up sizes n so one matmul takes <= ~50 ms (a slow
    dtype is probed small), then matmuls for ``budget_s`` seconds (at least 3)."""
    import torch

    def once(a: torch.Tensor, b: torch.Tensor) -> float:
        start = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    small = torch.randn(256, 256, dtype=dtype, device=device)
    once(small, small)
    rate = 2 * 256**3 / max(min(once(small, small) for _ in range(2)), 1e-9)
    side = int(min(MAX_SIDE if device == "cpu" else 4096, max(128, (rate * 0.05 / 2) ** (1 / 3))))
    a, b = torch.randn(side, side, dtype=dtype, device=device), torch.randn(side, side, dtype=dtype, device=device)
    best, spent, reps = once(a, b), 0.0, 0
    while reps < 3 or spent < budget_s:
        took = once(a, b)
        best, spent, reps = min(best, took), spent + took, reps + 1
    return 2 * side**3 / best / 1e9


def measure(device: str = "cpu", budget_s: float = PROBE_BUDGET_S) -> MachineProbe:
    """Run the probe now: fp32 then bf16 matmuls on one CPU thread (its setting restored) or the GPU."""
    import torch

    name, flags = cpu_identity()
    if device == "cuda":
        name, flags = torch.cuda.get_device_name(), ()
    start, threads = time.perf_counter(), torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)
    try:
        fp32 = _matmul_gflops(torch.float32, device, budget_s)
        bf16 = _matmul_gflops(torch.bfloat16, device, budget_s)
    finally:
        torch.set_num_threads(threads)
    return MachineProbe(device=device, name=name, flags=flags, torch_version=torch.__version__,
                        threads=1 if device == "cpu" else 0, fp32_gflops=fp32, bf16_gflops=bf16,
                        probe_s=time.perf_counter() - start)


def cache_path(device: str, cache_dir: Path | None = None) -> Path:
    """The cache file of this machine's probe on ``device``."""
    import torch

    from swerl.inference.model_files import default_cache_dir

    name, flags = cpu_identity()
    if device == "cuda":
        name = f"{name} + {torch.cuda.get_device_name()}"
    raw = "|".join([str(CACHE_VERSION), device, name, " ".join(flags), torch.__version__])
    return (cache_dir or default_cache_dir()) / "machine" / f"{hashlib.sha256(raw.encode()).hexdigest()[:16]}.json"


def probe_machine(device: str = "cpu", cache_dir: Path | None = None, refresh: bool = False) -> MachineProbe:
    """This machine's probe on ``device``: from the cache, else measured once (under a file lock) and cached.

    Args:
        device: ``cpu`` or ``cuda`` (the device the trainer computes on).
        cache_dir: root of swerl's caches (default ``$SWERL_CACHE`` or ``~/.cache/swerl``).
        refresh: measure again even when a cached probe exists.
    """
    from filelock import FileLock

    from swerl.fileio import atomic_write_json

    path = cache_path(device, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file() and not refresh:
            try:
                data = json.loads(path.read_text())
                return MachineProbe(**{**data, "flags": tuple(data["flags"]), "cached": True})
            except (OSError, ValueError, TypeError, KeyError):
                pass  # unreadable or from another version: measure again
        probe = measure(device)
        atomic_write_json(path, {k: v for k, v in asdict(probe).items() if k != "cached"})
    return probe


def forced_probe(fp32_gflops: float, bf16_gflops: float, device: str = "cpu", name: str = "forced",
                 flags: tuple[str, ...] = ()) -> MachineProbe:
    """A probe with given figures: the choice logic of another machine kind, without measuring (tests)."""
    return MachineProbe(device=device, name=name, flags=flags, torch_version="forced", threads=1 if device == "cpu" else 0,
                        fp32_gflops=fp32_gflops, bf16_gflops=bf16_gflops, probe_s=0.0)


def device_problem(field: str, device: str) -> str | None:
    """Why torch device ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``auto``) is not on this machine,
    as one line naming ``field`` and the fix; None when it is there (or ``auto``/``cpu``).

    Reads ``torch.cuda.device_count()`` (the GPUs this process sees: ``CUDA_VISIBLE_DEVICES`` applies).
    """
    kind, _, index = device.partition(":")
    if kind in ("auto", "cpu") and not index:
        return None
    if kind != "cuda" or (index and not index.isdigit()):
        return f"{field}: {device!r} is not a device swerl runs on; use cpu, cuda or cuda:N (N counts from 0)"
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        return (f"{field}: {device}, but this machine has no CUDA GPU that torch can use (torch.cuda.is_available() "
                f"is False); set {field}=cpu (or auto)")
    if index and int(index) >= count:
        return (f"{field}: {device}, but this machine has {count} CUDA GPU{'s' if count > 1 else ''} "
                f"(cuda:0{f' to cuda:{count - 1}' if count > 1 else ''}); pick one of them")
    return None
