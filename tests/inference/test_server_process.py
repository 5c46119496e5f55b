"""How swerl starts a vLLM server, without starting one: its argv (loopback, processed log-probs,
swerl's worker extension, LoRA flags) and environment (dev routes, offline, its cores or GPU)."""

from __future__ import annotations

from swerl.inference.config import VLLMGenerator
from swerl.inference.engines.server_process import server_command, server_env


def test_server_command_and_env_loopback_dev_mode_own_cores() -> None:
    config = VLLMGenerator(vllm_mode="servers", enforce_eager=True, kv_cache_space_gib=2)
    argv = server_command(config, "/m", 8123, on_cpu=True)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(argv[3::], argv[4::]))
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8123"
    assert flags["--logprobs-mode"] == "processed_logprobs" and "--enforce-eager" in argv
    assert flags["--worker-extension-cls"] == "swerl.inference.engines.vllm_worker.SwerlWorkerExtension"
    env = server_env(config, "1", None, {"PATH": "/bin"})
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert server_env(config, None, "GPU-5e1f", {})["CUDA_VISIBLE_DEVICES"] == "GPU-5e1f"  # as the parent names it
    assert "--enable-lora" not in argv and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in env
    lora = server_command(config, "/m", 8123, max_lora_rank=32, on_cpu=True)
    assert lora[lora.index("--enable-lora") + 1:][:4] == ["--max-lora-rank", "32", "--max-loras", "1"]
    assert server_env(config, "1", None, {}, lora=True)["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_a_server_started_from_a_torchrun_rank_does_not_inherit_its_launcher_variables() -> None:
    """vLLM would read the trainer rank's RANK/WORLD_SIZE/MASTER_* as its own layout."""
    config = VLLMGenerator(vllm_mode="servers", enforce_eager=True, kv_cache_space_gib=2)
    rank = {"PATH": "/bin", "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "GROUP_RANK": "0", "OMP_NUM_THREADS": "1",
            "TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_RESTART_COUNT": "0",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "HF_HOME": "/hf"}
    for gpu, cores in ((None, "1"), ("0", None)):
        env = server_env(config, cores, gpu, rank)
        assert env["PATH"] == "/bin" and env["HF_HOME"] == "/hf"
        left = {k for k in rank if k in env and env[k] == rank[k]} - {"PATH", "HF_HOME"}
        assert left == set(), left


def test_a_server_takes_its_device_default_of_tokens_per_scheduler_step_unless_one_is_set() -> None:
    def batched(argv: list[str]) -> int:
        return int(argv[argv.index("--max-num-batched-tokens") + 1])

    config = VLLMGenerator(vllm_mode="servers")
    assert batched(server_command(config, "/m", 8123, on_cpu=True)) == 4096
    assert batched(server_command(config, "/m", 8123, on_cpu=False)) == 8192
    pinned = VLLMGenerator(vllm_mode="servers", max_num_batched_tokens=2048)
    assert batched(server_command(pinned, "/m", 8123, on_cpu=False)) == 2048
