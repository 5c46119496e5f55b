"""Settings of the inference stage: which backend generates, on what model, with which engine knobs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerl.fields import set_fields


ONLY_READ_BY: dict[str, tuple[str, ...]] = {
    "hf": ("device",),
    "vllm": ("vllm_mode", "num_servers", "server_urls", "cpu_cores", "kv_cache_space_gib", "server_start_timeout_s",
             "gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "enforce_eager",
             "enable_prefix_caching", "enable_sleep_mode", "fp32_lm_head", "weight_sync", "weight_sync_dir",
             "weight_sync_address"),
    "openai": ("tokenizer", "api_key_env", "openai_endpoint"),
}
"""Fields that one backend alone reads; set with another backend, they are refused at load."""
SERVERS_ONLY: tuple[str, ...] = ("num_servers", "server_urls", "server_start_timeout_s")
"""vllm fields read by the server pool only (not by an in-process engine)."""
BATCHER_ONLY: tuple[str, ...] = ("max_batch_size", "batch_wait_s")
"""Fields of the async batcher, which vllm does without (continuous batching: each request goes to
the engine as it comes, ``max_num_seqs`` bounds them)."""
AUTO_CHOICES: tuple[str, ...] = ("hf", "vllm")
"""What ``backend: auto`` resolves to (``swerl train`` only; ``trainer/setup/auto.py``)."""


class InferenceConfig(BaseModel):
    """One generation backend and its knobs (``make_backend`` builds it).

    Sampling settings (temperature, top-p, ...) are per request (``SamplingParams``), not here.
    """

    model_config = ConfigDict(extra="forbid")

    backend: Literal["hf", "vllm", "openai", "auto"] = Field(
        "hf", description="hf: transformers generate; vllm: vLLM engines (in-process or servers, CPU or GPU); openai: any server; "
        "auto (swerl train): hf or vllm, resolved at start from what the machine measures (trainer/setup/auto.py)."
    )
    model: str | None = Field(
        None, description="HF folder or .gguf file (None = default SmolLM2-135M-Instruct); openai: the served name."
    )
    lora_adapter: str | None = Field(
        None, description="A peft LoRA adapter folder to sample with, on top of model (hf: loaded onto it with "
        "peft; vllm: LoRA on, every request with the adapter). swerl train supplies its own adapters: leave unset."
    )
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None, description="Weights dtype; None = float32 for hf, bfloat16 for vllm (must equal the trainer's)."
    )
    device: str = Field("cpu", description="hf: torch device, e.g. cpu or cuda:0.")
    seed: int = Field(0, description="Backend sampling seed for requests without their own seed.")
    num_threads: int | None = Field(
        None,
        ge=1,
        description="hf on CPU: torch intra-op threads for the whole process (None = leave torch's setting); "
        "1 is ~10x faster than 2 on a 2-core machine busy with sandboxes (bench/generation_throughput.py).",
    )
    max_batch_size: int = Field(
        8, ge=1, description="hf: most prompts per generate call (async batcher); openai: requests in flight. "
        "vllm batches continuously (max_num_seqs)."
    )
    batch_wait_s: float = Field(0.05, ge=0, description="hf: how long the batcher waits to fill a batch, seconds.")

    vllm_mode: Literal["inprocess", "servers"] = Field(
        "inprocess",
        description="vllm: 'inprocess' = a vllm.LLM in this process; 'servers' = vLLM OpenAI servers that swerl "
        "starts (num_servers per rank) or that server_urls names.",
    )
    num_servers: int = Field(1, ge=1, description="vllm servers: how many servers swerl starts per rank.")
    server_urls: list[str] = Field(
        default_factory=list,
        description="vllm servers: roots of running vLLM servers (http://host:port, started with "
        "VLLM_SERVER_DEV_MODE=1 and swerl's worker extension); empty = swerl starts its own.",
    )
    cpu_cores: list[str] | None = Field(
        None,
        description="vllm on CPU: VLLM_CPU_OMP_THREADS_BIND of each engine, e.g. ['0'] or ['0', '1'] for two "
        "servers; None = engine k takes core k and the trainer keeps the remaining cores.",
    )
    kv_cache_space_gib: int = Field(1, ge=1, description="vllm on CPU: KV cache per engine, whole GiB (VLLM_CPU_KVCACHE_SPACE).")
    server_start_timeout_s: float = Field(900.0, gt=0, description="vllm servers: wait this long for /health, seconds.")
    gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="vllm on GPU: fraction of TOTAL GPU memory for weights + activations + KV cache."
    )
    max_model_len: int = Field(
        8192, ge=16, description="vllm: longest prompt + generation, tokens (sizes the KV cache)."
    )
    max_num_seqs: int = Field(64, ge=1, description="vllm: sequences scheduled at once.")
    max_num_batched_tokens: int | None = Field(4096, ge=16, description="vllm: tokens per scheduler step.")
    enforce_eager: bool = Field(False, description="vllm: no torch.compile / CUDA graphs (starts faster, runs slower).")
    enable_prefix_caching: bool = Field(True, description="vllm: reuse KV of shared prefixes (reset on weight sync).")
    enable_sleep_mode: bool = Field(False, description="vllm on GPU: allow sleep/wake to free GPU memory for training.")
    fp32_lm_head: bool = Field(False, description="vllm: compute the LM head in fp32 (hf_overrides head_dtype).")
    weight_sync: Literal["disk", "nccl"] = Field(
        "disk",
        description="vllm: how trained weights reach the engines after each optimizer step: 'disk' = safetensors in "
        "a shared folder, reloaded by every engine (CPU and GPU); 'nccl' = vLLM's NCCL weight transfer (GPU servers).",
    )
    weight_sync_dir: str | None = Field(
        None, description="vllm disk sync: the folder every engine reads the new weights from (one run's own: folders "
        "of older versions in it are removed); None = RUN_DIR/weight_sync."
    )
    weight_sync_address: str | None = Field(
        None, description="vllm nccl sync: the address at which the servers' workers reach this node's trainer ranks "
        "(their rendezvous; set per node, e.g. --set generator.weight_sync_address=$(hostname -i)); None = 127.0.0.1 "
        "for servers swerl starts on the node, this host's name for server_urls."
    )
    logprob_diff_limit: float = Field(
        0.1,
        gt=0,
        description="Parity probe after each sync: stop the run when the mean |engine - trainer| log-prob of the "
        "probe tokens exceeds this, nats (bf16 vLLM vs the fp32 trainer, SmolLM2 on CPU: 0.016-0.023 measured).",
    )
    probe_tokens: int = Field(32, ge=1, description="Parity probe: tokens sampled from the fixed probe prompt.")

    base_url: str | None = Field(None, description="openai: server root, e.g. http://127.0.0.1:8000/v1.")
    tokenizer: str | None = Field(
        None, description="openai: local HF folder or .gguf whose tokenizer the served model uses (chat template)."
    )
    api_key_env: str = Field("OPENAI_API_KEY", description="openai: environment variable holding the API key.")
    openai_endpoint: Literal["completions", "chat"] = Field(
        "completions", description="openai: /completions with token-id prompts, or /chat/completions with messages."
    )
    request_timeout_s: float = Field(600.0, gt=0, description="openai: per-request timeout, seconds.")

    @model_validator(mode="after")
    def _check_backend_fields(self) -> InferenceConfig:
        if self.backend == "openai" and not self.base_url:
            raise ValueError("inference.base_url is required for backend 'openai'; fix: set it to the server's /v1 URL")
        if self.backend != "openai" and self.base_url:
            raise ValueError(f"inference.base_url is only used by backend 'openai', not {self.backend!r}: remove it")
        if self.backend == "vllm" and self.cpu_cores is not None and len(self.cpu_cores) < self.num_engines:
            raise ValueError(
                f"inference.cpu_cores lists {len(self.cpu_cores)} core sets for {self.num_engines} engines: add one per engine"
            )
        if self.backend == "openai" and self.lora_adapter:
            raise ValueError("inference.lora_adapter is applied by backends hf and vllm; an openai server serves its "
                             "own adapters: remove it and name the adapter as the model")
        if self.backend == "vllm" and self.dtype == "float16":
            raise ValueError("inference.dtype float16 is not supported with vllm; fix: use bfloat16 (trainer dtype)")
        for backend, names in ONLY_READ_BY.items():
            # auto: the fields of hf and vllm wait for the resolution (they apply when their backend is chosen)
            undecided = self.backend == "auto" and backend in AUTO_CHOICES
            stray = set_fields(self, names) if self.backend != backend and not undecided else []
            if stray:
                raise ValueError(f"inference.{stray[0]} is only read by backend {backend!r}, not {self.backend!r}: "
                                 "remove it")
        stray = set_fields(self, BATCHER_ONLY) if self.backend == "vllm" else []
        if stray:
            fields = type(self).model_fields
            defaults = ", ".join(f"{name}={fields[name].get_default()}" for name in stray)
            raise ValueError(f"inference.{', '.join(stray)} not read by backend 'vllm' (continuous batching: every "
                             f"request goes to the engine as it comes, max_num_seqs bounds them): remove, or set to the "
                             f"defaults {defaults}")
        if self.weight_sync_address and self.weight_sync != "nccl":
            raise ValueError("inference.weight_sync_address is only read with weight_sync=nccl: remove it")
        in_process = self.backend in ("vllm", "auto") and self.vllm_mode == "inprocess"
        stray = set_fields(self, SERVERS_ONLY) if in_process else []
        if stray:
            raise ValueError(f"inference.{stray[0]} is only read with vllm_mode=servers: remove it or set vllm_mode=servers")
        return self

    @property
    def num_engines(self) -> int:
        """vLLM engines this config drives per rank: 1 in-process, else the servers started or named."""
        if self.backend != "vllm" or self.vllm_mode == "inprocess":
            return 1
        return len(self.server_urls) or self.num_servers

    def resolved_dtype(self) -> str:
        """The dtype actually used: ``dtype`` or the backend default."""
        return self.dtype or ("bfloat16" if self.backend == "vllm" else "float32")
