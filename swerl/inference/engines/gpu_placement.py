"""Which GPUs the vLLM servers of a rank go on: the node's visible GPUs (the parent's
``CUDA_VISIBLE_DEVICES``, as Slurm or Kubernetes set it for a partial allocation) after the ones
the node's trainer ranks use, so a server never lands on a trainer's GPU or on one the job was
not given. Servers on GPUs of their own are what lets generation run while the trainer updates
(``loop.max_staleness_steps >= 1``; docs/scaling.md).
"""

from __future__ import annotations

from swerl.errors import EnvironmentProblem


def visible_gpus(cuda_visible_devices: str | None, device_count: int) -> list[str]:
    """The GPUs this process may use, as the ids a child's ``CUDA_VISIBLE_DEVICES`` takes.

    Args:
        cuda_visible_devices: the parent's variable (indices, ``GPU-<uuid>`` or MIG ids, kept as
            written); None when unset.
        device_count: ``torch.cuda.device_count()`` (used when the variable is unset).

    Returns:
        e.g. ``["4", "5", "6", "7"]`` for ``CUDA_VISIBLE_DEVICES=4,5,6,7``; ``["0", ..]`` when unset.
    """
    if cuda_visible_devices is None:
        return [str(index) for index in range(device_count)]
    return [entry.strip() for entry in cuda_visible_devices.split(",") if entry.strip()]


def server_gpus(visible: list[str], local_rank: int, local_world_size: int, num_servers: int) -> list[str]:
    """The GPUs of local rank ``local_rank``'s ``num_servers`` servers.

    Trainer rank r of a node uses ``visible[r]``; the servers take the GPUs after all of them, each
    rank a contiguous block: rank r's server k is on ``visible[L + r * S + k]`` (L = ranks on the
    node, S = servers per rank).

    Raises:
        EnvironmentProblem: the node has fewer than ``L * (1 + S)`` visible GPUs (names the fix).
    """
    first = local_world_size + local_rank * num_servers
    needed = local_world_size * (1 + num_servers)
    if len(visible) < needed:
        raise EnvironmentProblem(
            f"generator.num_servers={num_servers} per rank with {local_world_size} trainer ranks on this node needs "
            f"{needed} GPUs (each server on a GPU of its own), but {len(visible)} are visible ({','.join(visible)}); "
            "fix: lower generator.num_servers or --nproc_per_node, or run the servers elsewhere (generator.server_urls)"
        )
    return visible[first : first + num_servers]
