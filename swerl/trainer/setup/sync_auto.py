"""``generator.weight_sync: auto`` resolved for this node: NCCL broadcast where every vLLM server the
trainer feeds runs on this node and the trainer has CUDA and NCCL, else the disk path.

Rules (an explicit ``disk`` or ``nccl`` always wins; :func:`choose_weight_sync` is the whole logic, a
pure function of a :class:`SyncProbe` and the config's fields):

- ``disk`` where NCCL cannot carry this run's weights: a LoRA policy (its adapter travels through a
  folder either way), an in-process engine (vLLM's transfer feeds servers), the exact schedule
  (``loop.exact_staleness`` with k >= 1: NCCL sends the live weights, the engines cannot wait for
  the batch that needs them), a trainer on CPU, a torch without NCCL, a vLLM without the
  trainer-side transfer module.
- ``disk`` for servers on other nodes: a ``server_urls`` host that is not this machine, or
  ``server_urls`` shared by ranks on several nodes (each rank sees other nodes' servers).
- ``nccl`` otherwise: the servers swerl starts on this node's GPUs, or ``server_urls`` whose hosts
  all resolve to this machine; the owner rank broadcasts each bf16 tensor from GPU memory, and no
  version is written to or read back from disk.

The probe (:func:`probe_sync`) reads the trainer's device, torch's NCCL, where vLLM's transfer module
would be (found without importing vLLM) and each server host's addresses; tests force it
(:func:`forced_sync_probe`).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from swerl.inference.config import VLLMGenerator
from swerl.text import counted

TRANSFER_MODULE = ("distributed", "weight_transfer", "nccl_engine.py")
"""Where vLLM keeps its trainer-side NCCL weight transfer, under the vllm package folder."""


@dataclass(frozen=True)
class SyncProbe:
    """What ``weight_sync: auto`` needs to know about this node.

    Attributes:
        cuda: the trainer computes on a CUDA GPU (``model.device`` cuda, or auto, with a GPU visible).
        nccl: torch was built with NCCL (``torch.distributed.is_nccl_available()``).
        transfer_api: the installed vLLM has the trainer-side NCCL weight-transfer module.
        remote_hosts: the ``server_urls`` hosts that are not this machine, in order; () when swerl
            starts its own servers, every URL's host is this machine, or the trainer is on CPU (not
            looked up: a CPU trainer syncs through disk anyway).
        multi_node: the launch spans several nodes (torchrun ``WORLD_SIZE`` > ``LOCAL_WORLD_SIZE``).
    """

    cuda: bool
    nccl: bool
    transfer_api: bool
    remote_hosts: tuple[str, ...] = ()
    multi_node: bool = False


@dataclass(frozen=True)
class SyncChoice:
    """What ``weight_sync: auto`` became (``disk`` or ``nccl``) and why, in one clause."""

    weight_sync: str
    why: str


def forced_sync_probe(cuda: bool = True, nccl: bool = True, transfer_api: bool = True,
                      remote_hosts: tuple[str, ...] = (), multi_node: bool = False) -> SyncProbe:
    """A probe with given facts (tests, and machines described rather than measured)."""
    return SyncProbe(cuda, nccl, transfer_api, tuple(remote_hosts), multi_node)


def _blocker(probe: SyncProbe, gen: VLLMGenerator, lora: bool, exact_schedule: bool) -> str | None:
    """Why NCCL cannot carry this run's weights on this node, in words; None when it can."""
    if lora:
        return "model.lora: the adapter travels through a folder the engines load (tens of MB)"
    if gen.vllm_mode == "inprocess":
        return "vllm_mode=inprocess: vLLM's NCCL weight transfer feeds servers, not an in-process engine"
    if exact_schedule:
        return ("loop.exact_staleness with max_staleness_steps >= 1: NCCL sends the live weights, the engines "
                "could not wait for the batch that needs them")
    if not probe.cuda:
        return "the trainer is not on a CUDA GPU: vLLM's CPU build has no NCCL weight transfer"
    if not probe.nccl:
        return "this torch has no NCCL"
    if not probe.transfer_api:
        return "the installed vLLM lacks the NCCL weight-transfer module (0.29 or newer has it)"
    if probe.remote_hosts:
        return f"server_urls host {', '.join(probe.remote_hosts)} is not this machine (a server on another node)"
    if gen.server_urls and probe.multi_node:
        return "server_urls shared by ranks on several nodes: some servers are on another node than their owner rank"
    return None


def choose_weight_sync(probe: SyncProbe, gen: VLLMGenerator, *, lora: bool = False,
                       exact_schedule: bool = False) -> SyncChoice | None:
    """Resolve ``gen.weight_sync: auto`` from a probe (measured, or forced in tests).

    Args:
        probe: this node's facts (:class:`SyncProbe`).
        gen: the vLLM generator as configured. lora: ``model.lora`` is set.
        exact_schedule: ``loop.exact_staleness`` with ``loop.max_staleness_steps >= 1``.
    Returns:
        None when ``gen.weight_sync`` is explicit (it wins); else ``disk`` or ``nccl`` and the reason.
    """
    if gen.weight_sync != "auto":
        return None
    blocker = _blocker(probe, gen, lora, exact_schedule)
    if blocker is not None:
        return SyncChoice("disk", blocker)
    where = (f"every server_urls host is this machine ({counted(len(gen.server_urls), 'server')})" if gen.server_urls
             else f"swerl starts {counted(gen.num_servers, 'server')} per rank on this node's GPUs")
    return SyncChoice("nccl", f"{where}, CUDA and NCCL here: the owner rank broadcasts from GPU memory, no disk")


def url_host(url: str) -> str:
    """The host of a server root (``http://host:port`` -> ``host``; the URL itself when it has none)."""
    return urlsplit(url).hostname or url


def is_this_machine(host: str) -> bool:
    """True when every address ``host`` resolves to is this machine's: a loopback address, or one
    a socket can bind here (an address of one of this machine's interfaces). False when ``host``
    does not resolve."""
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {(info[0], info[4][0]) for info in infos}
    for family, address in addresses:
        if ipaddress.ip_address(address.split("%")[0]).is_loopback:
            continue
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.bind((address, 0))
        except OSError:  # EADDRNOTAVAIL: another machine's address
            return False
    return bool(addresses)


def transfer_api_present() -> bool:
    """vLLM's trainer-side NCCL weight-transfer module is installed (found without importing vLLM)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(Path(root, *TRANSFER_MODULE).is_file() for root in spec.submodule_search_locations)


def launch_sizes() -> tuple[int, int]:
    """(ranks of this launch, ranks on this node): torchrun's ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``
    ((1, 1) without torchrun)."""
    import os

    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def probe_sync(gen: VLLMGenerator, device: str, sizes: tuple[int, int] | None = None) -> SyncProbe:
    """This node's :class:`SyncProbe` for ``gen`` with the trainer on ``device`` (``cuda`` or ``cpu``)
    in a launch of ``sizes`` = (ranks, ranks on this node) (default :func:`launch_sizes`)."""
    world_size, local_world_size = sizes or launch_sizes()
    cuda = nccl = False
    if device == "cuda":
        import torch
        import torch.distributed

        cuda = torch.cuda.is_available()
        nccl = torch.distributed.is_available() and torch.distributed.is_nccl_available()
    hosts = dict.fromkeys(url_host(url) for url in gen.server_urls) if device == "cuda" else {}
    remote = tuple(host for host in hosts if not is_this_machine(host))
    return SyncProbe(cuda=cuda, nccl=nccl, transfer_api=transfer_api_present(), remote_hosts=remote,
                     multi_node=world_size > local_world_size)
