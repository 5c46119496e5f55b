"""Start vLLM OpenAI servers for swerl (one per core set or GPU, loopback only): the command line
and environment of swerl's flags (worker extension, dev routes, LoRA), the process with its log
file, dying with its parent, and the wait until every server is healthy. ``vllm_server.py`` talks
to them once they are up.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from swerl.errors import EnvironmentProblem
from swerl.inference.config import InferenceConfig
from swerl.inference.engines.vllm_backend import cpu_engine_env
from swerl.inference.engines.vllm_worker import EXTENSION_QUALNAME

log = logging.getLogger(__name__)

SERVED_NAME = "swerl-policy"
"""The model name swerl's servers serve the base policy under (``--served-model-name``)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_command(config: InferenceConfig, model_path: str, port: int, max_lora_rank: int | None = None, *,
                   on_cpu: bool) -> list[str]:
    """argv of one vLLM OpenAI server on ``127.0.0.1:port`` serving ``model_path`` as ``swerl-policy``
    (with ``max_lora_rank``: LoRA on, one adapter slot of at least that rank; ``server_env`` then
    turns on the runtime adapter routes); ``on_cpu``: the server runs on CPU cores, not a GPU
    (its default tokens per scheduler step).

    The ``vllm`` console script of the CPU build fails (``PackageNotFoundError``), so the module runs.
    """
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model_path, "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", config.resolved_dtype(),
        "--max-model-len", str(config.max_model_len),
        "--max-num-seqs", str(config.max_num_seqs),
        "--max-num-batched-tokens", str(config.resolved_max_num_batched_tokens(on_cpu)),
        "--seed", str(config.seed),
        "--logprobs-mode", "processed_logprobs",
        "--worker-extension-cls", EXTENSION_QUALNAME,
        "--disable-uvicorn-access-log",
    ]
    if config.weight_sync == "nccl":
        argv += ["--weight-transfer-config", '{"backend": "nccl"}']
    if config.enforce_eager:
        argv.append("--enforce-eager")
    if not config.enable_prefix_caching:
        argv.append("--no-enable-prefix-caching")
    if max_lora_rank is not None:
        from swerl.inference.engines.vllm_backend import lora_slot_rank

        argv += ["--enable-lora", "--max-lora-rank", str(lora_slot_rank(max_lora_rank)), "--max-loras", "1"]
    return argv


LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                      "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
                      "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF")
"""Variables ``torchrun`` (or the trainer) sets for a trainer rank that a server must not inherit:
vLLM reads RANK/WORLD_SIZE/MASTER_* as its own distributed layout, torchrun's
``OMP_NUM_THREADS=1`` would starve its CPU threads, and the trainer's allocator settings conflict
with vLLM's sleep-mode pool. ``TORCHELASTIC_*`` variables are removed too."""


def without_launcher_variables(base: dict[str, str]) -> dict[str, str]:
    """``base`` less :data:`LAUNCHER_VARIABLES` and every ``TORCHELASTIC_*`` variable."""
    return {k: v for k, v in base.items() if k not in LAUNCHER_VARIABLES and not k.startswith("TORCHELASTIC_")}


def server_env(config: InferenceConfig, cores: str | None, gpu: str | None, base: dict[str, str],
               lora: bool = False) -> dict[str, str]:
    """Environment of one server: ``base`` without the trainer rank's launcher variables
    (:func:`without_launcher_variables`), dev routes on (and the runtime LoRA routes with ``lora``),
    hub offline, swerl importable, its cores or GPU.

    Args:
        cores: CPU only, ``VLLM_CPU_OMP_THREADS_BIND`` (e.g. ``"0"``). gpu: GPU only, its id as the
            parent's ``CUDA_VISIBLE_DEVICES`` names it (``swerl.inference.engines.gpu_placement``).
    """
    env = without_launcher_variables(base)
    env.update({"VLLM_SERVER_DEV_MODE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                "VLLM_CONFIGURE_LOGGING": "1"})  # a server logs to its own file (this process may have set 0)
    if lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    swerl_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (swerl_root, base.get("PYTHONPATH", "")) if p)
    if gpu is None:
        env.update(cpu_engine_env(config, cores))
    else:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the process that started it dies (Linux
    ``PR_SET_PDEATHSIG``), so a killed trainer leaves no server behind."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


class ServerProcess:
    """One vLLM server that swerl started; :meth:`stop` ends it (and its engine-core child).

    Attributes:
        url: ``http://127.0.0.1:PORT``. log_path: the server's stdout+stderr.
    """

    def __init__(self, argv: list[str], env: dict[str, str], port: int, log_path: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=_die_with_parent)

    def wait_ready(self, deadline: float) -> None:
        """Poll ``GET /health`` until 200 or ``deadline`` (monotonic seconds).

        Raises:
            EnvironmentProblem: the server exited or did not answer in time (naming its log).
        """
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EnvironmentProblem(
                    f"vLLM server {self.url} exited with code {self.proc.returncode} while starting; see {self.log_path}"
                )
            try:
                if requests.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(1.0)
        raise EnvironmentProblem(f"vLLM server {self.url} not ready in time; see {self.log_path}")

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the server's process group, SIGKILL after ``timeout_s``."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self._log.close()


def start_servers(
    config: InferenceConfig, model_path: str, log_dir: Path, cores: list[str | None], gpus: list[str | None],
    max_lora_rank: int | None = None,
) -> list[ServerProcess]:
    """Start one server per entry of ``cores``/``gpus`` (all at once), wait until every one is healthy
    (for LoRA adapters up to ``max_lora_rank`` when given).

    Raises:
        EnvironmentProblem: a server died or timed out (the others are stopped).
    """
    servers: list[ServerProcess] = []
    try:
        for index, (core_set, gpu) in enumerate(zip(cores, gpus, strict=True)):
            port = free_port()
            argv = server_command(config, model_path, port, max_lora_rank, on_cpu=gpu is None)
            if gpu is not None:
                argv += ["--gpu-memory-utilization", str(config.gpu_memory_utilization)]
            env = server_env(config, core_set, gpu, dict(os.environ), lora=max_lora_rank is not None)
            servers.append(ServerProcess(argv, env, port, log_dir / f"vllm-server-{index}.log"))
            log.info("starting vLLM server %s (cores %s, gpu %s)", servers[-1].url, core_set, gpu)
        deadline = time.monotonic() + config.server_start_timeout_s
        for server in servers:
            server.wait_ready(deadline)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers
