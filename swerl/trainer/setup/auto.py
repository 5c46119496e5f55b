"""``auto`` in a TrainConfig (``model.dtype``, ``generator.backend``, ``generator.weight_sync``) resolved
for this machine from what it measures (``inference/machine.py``, ``sync_auto.py``), and what a resume
on another machine changed.

Rules (an explicit value always wins; ``choose`` is the whole logic, a pure function):

- ``model.dtype: auto`` -> ``bfloat16`` (autocast, fp32 master weights) where the probe's bf16
  matmul rate is at least :data:`BF16_MIN_SPEEDUP` x its fp32 rate, else ``float32``. The
  update's other work (fp32 log-softmax and AdamW, autocast's casts) dilutes the matmul gain:
  2.9x in matmul gave 1.5x in the update on an AVX512-BF16 EPYC, so below ~1.5x bf16 would not pay.
- ``generator.backend: auto`` -> ``vllm`` (in process unless ``vllm_mode`` says servers) where vLLM
  is installed and the trainer is on a GPU, or bf16 is fast here, or ``model.fsdp`` is on (a
  sharded module cannot generate); else ``hf`` on the live policy. vLLM's dtype, when
  ``generator.dtype`` is unset: bf16 where bf16 is fast, else fp32. On an AVX2-only CPU (no bf16
  kernel) HF generate in fp32 outran the vLLM CPU build, which is today's CPU default.
- ``generator.weight_sync: auto`` (a vLLM generator, or ``auto``'s vllm candidate once chosen) ->
  ``nccl`` where every server runs on this node and CUDA and NCCL are here, else ``disk``
  (``sync_auto.py``: its rules, and a probe of its own; no matmul probe when only it is ``auto``).
- ``generator.backend: auto`` holds one section per candidate (``generator.hf``, ``generator.vllm``,
  each validated as that backend's config at load); the resolved config's generator is the chosen
  section, nothing else of the other.

The resolved config is what the run uses and what ``RUN_DIR/config.yaml`` records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from swerl.errors import ConfigError
from swerl.inference.config import AutoGenerator, VLLMGenerator
from swerl.inference.machine import MachineProbe
from swerl.trainer.config import TrainConfig
from swerl.trainer.setup.sync_auto import SyncChoice, SyncProbe, choose_weight_sync, probe_sync

BF16_MIN_SPEEDUP = 1.5
"""bf16 / fp32 matmul rate from which ``auto`` trains in bf16 (and samples with vLLM on CPU)."""
BF16_UNITS = ("amx_bf16", "avx512_bf16", "bf16")
"""CPU flags of a native bf16 matmul unit: only compared with the measurement, in words."""


@dataclass(frozen=True)
class AutoChoice:
    """What ``auto`` became, and why.

    Attributes:
        dtype: the resolved ``model.dtype``.
        backend: the resolved ``generator.backend``.
        generator_dtype: the resolved ``generator.dtype`` (None: left as configured).
        reasons: (field, value, why) for each field resolved from ``auto``.
    """

    dtype: str
    backend: str
    generator_dtype: str | None
    reasons: tuple[tuple[str, str, str], ...]


def _flag_note(probe: MachineProbe, fast: bool) -> str:
    """A word when the CPU flags disagree with the measurement (the measurement decides)."""
    has_unit = any(flag in probe.flags for flag in BF16_UNITS)
    if probe.device != "cpu" or has_unit == fast or not probe.flags:
        return ""
    return f"; the CPU flags ({probe.hint()}) suggest {'a' if has_unit else 'no'} bf16 unit, the measurement decides"


def choose(probe: MachineProbe, *, dtype: str, backend: str, generator_dtype: str | None = None,
           fsdp: bool = False, vllm_installed: bool = True) -> AutoChoice:
    """Resolve ``auto`` values from a probe (a measured one, or a forced one in tests).

    Args:
        probe: the machine's bf16 and fp32 matmul rates on the trainer's device.
        dtype: ``model.dtype`` as configured (``auto``, ``float32`` or ``bfloat16``).
        backend: ``generator.backend`` as configured (``auto``, ``hf`` or ``vllm``).
        generator_dtype: ``generator.dtype`` as configured (None = unset).
        fsdp: ``model.fsdp``. vllm_installed: the vllm package is importable.
    Raises:
        ConfigError: ``model.fsdp`` with ``generator.backend: auto`` where vLLM is not installed.
    """
    speedup = probe.bf16_speedup
    fast = speedup >= BF16_MIN_SPEEDUP
    measured = f"bf16 matmul {speedup:.2f}x fp32 here, {'>=' if fast else '<'} {BF16_MIN_SPEEDUP}x"
    reasons = []
    if dtype == "auto":
        dtype = "bfloat16" if fast else "float32"
        what = "bf16 autocast, fp32 master weights" if fast else "bf16 would be slower here"
        reasons.append(("model.dtype", dtype, f"{measured}: {what}{_flag_note(probe, fast)}"))
    new_generator_dtype = None
    if backend == "auto":
        backend, why = _choose_backend(probe, fast, fsdp, vllm_installed, measured)
        reasons.append(("generator.backend", backend, why))
        if backend == "vllm" and generator_dtype is None:
            new_generator_dtype = vllm_dtype_for(probe)
            reasons.append(("generator.dtype", new_generator_dtype, f"{measured}: vLLM's dtype when auto chose vLLM"))
    return AutoChoice(dtype=dtype, backend=backend, generator_dtype=new_generator_dtype, reasons=tuple(reasons))


def vllm_dtype_for(probe: MachineProbe) -> str:
    """vLLM's dtype under ``auto``: bfloat16 where bf16 is fast on the probe, else float32."""
    return "bfloat16" if probe.bf16_speedup >= BF16_MIN_SPEEDUP else "float32"


def _choose_backend(probe: MachineProbe, fast: bool, fsdp: bool, vllm_installed: bool, measured: str) -> tuple[str, str]:
    """(hf or vllm, why) for ``generator.backend: auto``."""
    if fsdp and not vllm_installed:
        from swerl.inference.engines.vllm_backend import VLLM_FIX

        raise ConfigError(f"model.fsdp with generator.backend=auto needs vLLM (a sharded module cannot generate), which "
                          f"is not installed; fix: {VLLM_FIX}")
    if fsdp:
        return "vllm", "model.fsdp: a sharded module cannot generate"
    if not vllm_installed:
        return "hf", "the vllm package is not installed"
    if probe.device == "cuda":
        return "vllm", f"the trainer is on a GPU ({probe.name})"
    if fast:
        return "vllm", f"{measured}: the vLLM CPU build in bf16 samples several times faster than HF generate"
    return "hf", f"{measured}: HF generate on the live policy, faster than the vLLM CPU build without bf16 kernels"


def uses_machine_auto(config: TrainConfig) -> bool:
    """True when ``model.dtype`` or ``generator.backend`` is ``auto`` (the matmul probe decides them)."""
    return config.model.dtype == "auto" or isinstance(config.generator, AutoGenerator)


def uses_auto(config: TrainConfig) -> bool:
    """True when ``model.dtype``, ``generator.backend`` or the vLLM generator's ``weight_sync`` is ``auto``."""
    gen = config.generator
    vllm = gen.vllm if isinstance(gen, AutoGenerator) else gen
    return uses_machine_auto(config) or (isinstance(vllm, VLLMGenerator) and vllm.weight_sync == "auto")


def probe_device(config: TrainConfig) -> str:
    """The device the trainer computes on: ``cuda`` (set, or ``auto`` with a GPU present), else ``cpu``."""
    if config.model.device == "cpu":
        return "cpu"
    import torch

    return "cuda" if config.model.device == "cuda" or torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class Resolution:
    """A config with ``auto`` resolved.

    Attributes:
        config: the resolved config (no ``auto`` left); the input itself when it had none.
        probe: the machine probe it rests on (None when neither ``model.dtype`` nor
            ``generator.backend`` was ``auto``).
        choice: what was chosen for those two and why (None when neither was ``auto``).
        sync: what ``generator.weight_sync: auto`` became and why (None when it was not ``auto``).
    """

    config: TrainConfig
    probe: MachineProbe | None = None
    choice: AutoChoice | None = None
    sync: SyncChoice | None = None

    def rows(self) -> list[tuple[str, str]]:
        """(item, value) rows of the dry-run's plan: the machine and its probe, each choice and why;
        none when nothing was ``auto``."""
        rows = []
        if self.choice is not None and self.probe is not None:
            rows += [("auto: machine", self.probe.describe()),
                     *((f"auto: {field}", f"{value} ({why})") for field, value, why in self.choice.reasons)]
        if self.sync is not None:
            rows.append(("auto: generator.weight_sync", f"{self.sync.weight_sync} ({self.sync.why})"))
        return rows

    def lines(self) -> list[str]:
        """:meth:`rows` as log lines (``train.log``)."""
        return [f"{item} -> {value}" if item != "auto: machine" else f"{item}: {value}" for item, value in self.rows()]

    def as_dict(self) -> dict[str, Any]:
        """The resolution as JSON-ready data (``--json``); {} when nothing was ``auto``."""
        out: dict[str, Any] = {}
        if self.choice is not None and self.probe is not None:
            out = {"machine": self.probe.describe(), "bf16_speedup": self.probe.bf16_speedup,
                   "fp32_gflops": self.probe.fp32_gflops, "bf16_gflops": self.probe.bf16_gflops,
                   "model.dtype": self.config.model.dtype, "generator.backend": self.config.generator.backend,
                   "generator.dtype": self.config.generator.dtype,
                   "reasons": {field: why for field, _, why in self.choice.reasons}}
        if self.sync is not None:
            out["generator.weight_sync"] = self.sync.weight_sync
            out.setdefault("reasons", {})["generator.weight_sync"] = self.sync.why
        return out


def resolve_auto(config: TrainConfig, probe: MachineProbe | None = None,
                 sync_probe: SyncProbe | None = None) -> Resolution:
    """``config`` with its ``auto`` values resolved for this machine (``probe`` given or measured,
    cached; ``sync_probe`` given or probed, for ``generator.weight_sync``).

    Raises:
        ConfigError: the resolved config is invalid (e.g. ``generator.max_model_len`` below the
            context window once vllm is chosen), named with what ``auto`` chose.
    """
    if not uses_auto(config):
        return Resolution(config=config)
    data = config.model_dump(mode="json", exclude_unset=True)
    choice = None
    if uses_machine_auto(config):
        probe = probe or _probe_machine(config)
        choice = _choose_machine(config, probe, data)
    sync = _choose_sync(config, choice, sync_probe, data)
    try:
        resolved = TrainConfig.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = "".join(f"{part}." for part in first["loc"]).removesuffix(".") + ": " if first["loc"] else ""
        chose = ([f"model.dtype={choice.dtype}", f"generator.backend={choice.backend}"] if choice else []) + (
            [f"generator.weight_sync={sync.weight_sync}"] if sync else [])
        raise ConfigError(f"auto chose {', '.join(chose)} on this machine, and "
                          f"then {where}{first['msg'].removeprefix('Value error, ')}") from err
    return Resolution(config=resolved, probe=probe if choice else None, choice=choice, sync=sync)


def _probe_machine(config: TrainConfig) -> MachineProbe:
    """The matmul probe of the trainer's device (measured once per machine, cached)."""
    from swerl.inference.machine import probe_machine

    return probe_machine(probe_device(config))


def _choose_machine(config: TrainConfig, probe: MachineProbe, data: dict[str, Any]) -> AutoChoice:
    """:func:`choose` for ``config``, written into ``data`` (its dump): ``model.dtype``, and the
    chosen candidate as the generator under ``generator.backend: auto``."""
    from swerl.inference.machine import vllm_installed

    generator = config.generator
    auto = isinstance(generator, AutoGenerator)
    choice = choose(probe, dtype=config.model.dtype, backend=generator.backend,
                    generator_dtype=generator.vllm.dtype if auto else None, fsdp=config.model.fsdp,
                    vllm_installed=vllm_installed())
    data.setdefault("model", {})["dtype"] = choice.dtype
    if auto:  # the chosen candidate is the generator: the other candidate's section goes with it
        chosen = generator.candidate(choice.backend).model_dump(mode="json", exclude_unset=True)
        data["generator"] = {**chosen, "backend": choice.backend}
        if choice.generator_dtype is not None:
            data["generator"]["dtype"] = choice.generator_dtype
    return choice


def _choose_sync(config: TrainConfig, choice: AutoChoice | None, sync_probe: SyncProbe | None,
                 data: dict[str, Any]) -> SyncChoice | None:
    """:func:`choose_weight_sync` for the generator the run uses (``auto``'s candidate once
    ``choice`` picked it), written into ``data``; a ``weight_sync_address`` goes when disk is chosen
    (it is read by nccl only). None when that generator's ``weight_sync`` is not ``auto``."""
    gen = config.generator
    if isinstance(gen, AutoGenerator):
        gen = gen.candidate(choice.backend if choice else "hf")
    if not (isinstance(gen, VLLMGenerator) and gen.weight_sync == "auto"):
        return None  # the probe looks up server hosts: only when it decides something
    sync = choose_weight_sync(sync_probe or probe_sync(gen, probe_device(config)), gen,
                              lora=config.model.lora is not None,
                              exact_schedule=config.loop.max_staleness_steps > 0 and config.loop.exact_staleness)
    if sync is not None:
        data["generator"]["weight_sync"] = sync.weight_sync
        if sync.weight_sync == "disk":
            data["generator"].pop("weight_sync_address", None)
    return sync


def _flatten(data: object, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists are values)."""
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for every dotted key whose value differs between two config dicts
    (e.g. a run's ``config.yaml`` and the config that resumes it on another machine). Where
    ``generator.backend`` changed, the generator keys of one side only are left out: they are the
    fields of one backend, which the other has not (the backend's line says it)."""
    old, new = _flatten(before), _flatten(after)
    missing = "(unset)"
    switched = old.get("generator.backend") != new.get("generator.backend")
    keys = [key for key in sorted(old.keys() | new.keys())
            if not (switched and key.startswith("generator.") and (key in old) != (key in new))]
    return [f"{key}: {old.get(key, missing)} -> {new.get(key, missing)}"
            for key in keys if old.get(key, missing) != new.get(key, missing)]


def changes_since(path: Path, config: TrainConfig) -> list[str]:
    """:func:`config_changes` from a run's ``config.yaml`` at ``path`` to ``config``; [] when there is none."""
    import yaml

    if not path.is_file():
        return []
    return config_changes(yaml.safe_load(path.read_text()) or {}, config.model_dump(mode="json"))


def check_ranks_agree(config: TrainConfig) -> None:
    """Every rank resolved ``auto`` alike (each probes its own machine: nodes may differ).

    Raises:
        ConfigError: on every rank, naming the ranks' choices and the fix (explicit values).
    """
    from swerl.trainer import distributed as dist

    if not dist.is_distributed():
        return
    import torch

    gen = config.generator
    mine = (config.model.dtype, gen.backend, gen.resolved_dtype(),
            *((f"weight_sync {gen.weight_sync}",) if isinstance(gen, VLLMGenerator) else ()))
    every: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(every, mine)
    if len(set(every)) > 1:
        seen = ", ".join(f"rank {rank}: {'/'.join(choice)}" for rank, choice in enumerate(every))
        raise ConfigError(f"auto resolved differently across ranks ({seen}): set model.dtype, generator.backend and "
                          "generator.weight_sync explicitly")


def machine_choice(device: str = "cpu") -> tuple[MachineProbe, AutoChoice]:
    """This machine's probe on ``device`` (cached) and what ``model.dtype: auto`` and
    ``generator.backend: auto`` resolve to with it (benches' ``auto`` modes)."""
    from swerl.inference.machine import probe_machine, vllm_installed

    probe = probe_machine(device)
    return probe, choose(probe, dtype="auto", backend="auto", vllm_installed=vllm_installed())


def machine_summary(device: str = "cpu") -> list[str]:
    """Where a figure was measured, for benches: the CPU (model, bf16 units, cores, load average),
    the bf16 probe, and what ``auto`` resolves to here (``model.dtype``, ``generator.backend``)."""
    import os

    from swerl.inference.machine import cpu_identity

    probe, choice = machine_choice(device)
    name, _ = cpu_identity()
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    generator = choice.backend + (f" ({choice.generator_dtype})" if choice.generator_dtype else "")
    return [f"machine: {name} ({probe.hint() if device == 'cpu' else probe.name}), {len(os.sched_getaffinity(0))} cores, "
            f"load average {load}",
            f"bf16 probe: {probe.figures()}",
            f"auto: model.dtype={choice.dtype}, generator.backend={generator}"]
