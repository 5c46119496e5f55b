"""Settings of the inference stage: one pydantic model per generation backend, told apart by ``backend``.

``HFGenerator``, ``VLLMGenerator`` and ``OpenAIGenerator`` each hold only the fields their backend
reads (``extra="forbid"``: a field of another backend is pydantic's own error naming it); each has
one builder, picked by its type (``factory.build_backend``). ``InferenceConfig`` is the union of the three, discriminated by
``backend`` (``hf`` when it is left out). ``AutoGenerator`` is not a backend: it holds one candidate
config per backend ``auto`` may choose, and ``swerl train`` resolves it to exactly one of them
(``trainer/setup/auto.py``) before anything is built. Sampling settings (temperature, top-p, ...) are
per request (``SamplingParams``), not here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, model_validator

from swerl.fields import set_fields


class _Generator(BaseModel):
    """Fields every backend reads."""

    model_config = ConfigDict(extra="forbid")

    backend: str = Field(..., description="The backend (hf, vllm, openai): each subclass fixes it (the tag).")
    model: str | None = Field(
        None, description="HF folder or .gguf file (None = default SmolLM2-135M-Instruct); openai: the served name."
    )


class _LocalGenerator(_Generator):
    """Fields of the backends that load the weights themselves (hf, vllm): swerl train syncs them."""

    lora_adapter: str | None = Field(
        None, description="A peft LoRA adapter folder to sample with, on top of model (hf: loaded onto it with "
        "peft; vllm: LoRA on, every request with the adapter). swerl train supplies its own adapters: leave unset."
    )
    seed: int = Field(0, description="Backend sampling seed for requests without their own seed.")
    logprob_diff_limit: float = Field(
        0.1,
        gt=0,
        description="Parity probe after each sync: stop the run when the mean |engine - trainer| log-prob of the "
        "probe tokens exceeds this, nats (bf16 vLLM vs the fp32 trainer, SmolLM2 on CPU: 0.016-0.023 measured).",
    )
    probe_tokens: int = Field(32, ge=1, description="Parity probe: tokens sampled from the fixed probe prompt.")


class HFGenerator(_LocalGenerator):
    """transformers ``generate`` behind an async batcher (``swerl train``: on the live policy module)."""

    backend: Literal["hf"] = "hf"
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None, description="Weights dtype; None = float32 (swerl train: the trained module's own, leave unset)."
    )
    device: str = Field("cpu", description="torch device, e.g. cpu or cuda:0 (swerl train: model.device, leave unset).")
    num_threads: int | None = Field(
        None,
        ge=1,
        description="On CPU: torch intra-op threads for the whole process (None = leave torch's setting); "
        "1 is ~10x faster than 2 on a 2-core machine busy with sandboxes (bench/generation_throughput.py).",
    )
    max_batch_size: int = Field(8, ge=1, description="Most prompts per generate call (async batcher).")
    batch_wait_s: float = Field(0.05, ge=0, description="How long the batcher waits to fill a batch, seconds.")

    def resolved_dtype(self) -> str:
        """The dtype actually used: ``dtype``, else float32."""
        return self.dtype or "float32"



GPU_MAX_NUM_BATCHED_TOKENS = 8192
"""Tokens per scheduler step of a GPU engine by default: a 30k-token context re-prefills in 4 steps
(8 at 4096); vLLM's own defaults on an H100 are 16384 offline and 8192 for its server, and the
larger value takes more of a co-located engine's ``gpu_memory_utilization`` share for activations."""
CPU_MAX_NUM_BATCHED_TOKENS = 4096
"""Tokens per scheduler step of a CPU engine by default (vLLM's offline CPU default for one worker)."""


class VLLMGenerator(_LocalGenerator):
    """vLLM engines: one in this process, or OpenAI-compatible servers (started by swerl or named);
    continuous batching, so no batcher fields (``max_num_seqs`` bounds the requests)."""

    backend: Literal["vllm"] = "vllm"
    dtype: Literal["float32", "bfloat16"] | None = Field(
        None, description="Weights dtype; None = bfloat16 (must equal the trainer's; float16 is not supported)."
    )
    vllm_mode: Literal["inprocess", "servers"] = Field(
        "inprocess",
        description="'inprocess' = a vllm.LLM in this process; 'servers' = vLLM OpenAI servers that swerl "
        "starts (num_servers per rank) or that server_urls names.",
    )
    num_servers: int = Field(1, ge=1, description="servers: how many servers swerl starts per rank.")
    server_urls: list[str] = Field(
        default_factory=list,
        description="servers: roots of running vLLM servers (http://host:port, started with "
        "VLLM_SERVER_DEV_MODE=1 and swerl's worker extension); empty = swerl starts its own.",
    )
    server_start_timeout_s: float = Field(900.0, gt=0, description="servers: wait this long for /health, seconds.")
    cpu_cores: list[str] | None = Field(
        None,
        description="On CPU: VLLM_CPU_OMP_THREADS_BIND of each engine, e.g. ['0'] or ['0', '1'] for two "
        "servers; None = engine k takes core k and the trainer keeps the remaining cores.",
    )
    kv_cache_space_gib: int = Field(1, ge=1, description="On CPU: KV cache per engine, whole GiB (VLLM_CPU_KVCACHE_SPACE).")
    gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="On GPU: fraction of TOTAL GPU memory for weights + activations + KV cache."
    )
    max_model_len: int = Field(8192, ge=16, description="Longest prompt + generation, tokens (sizes the KV cache).")
    max_num_seqs: int = Field(64, ge=1, description="Sequences scheduled at once.")
    max_num_batched_tokens: int | None = Field(
        None, ge=16, description="Tokens per scheduler step: re-prefilling a C-token context after a weight sync (which "
        "resets the prefix cache) takes C / this steps. None = by the engine's device: 8192 on a GPU (vLLM's OpenAI "
        "server default on an H100, its offline default on smaller GPUs), 4096 on CPU (vLLM's offline CPU default).",
    )
    enforce_eager: bool = Field(False, description="No torch.compile / CUDA graphs (starts faster, runs slower).")
    enable_prefix_caching: bool = Field(True, description="Reuse KV of shared prefixes (reset on weight sync).")
    enable_sleep_mode: bool = Field(False, description="On GPU: allow sleep/wake to free GPU memory for training.")
    fp32_lm_head: bool = Field(False, description="Compute the LM head in fp32 (hf_overrides head_dtype).")
    return_sampling_mask: bool = Field(
        False,
        description=(
            "In-process: return each sampled token's kept set under top-k/top-p (vLLM >= 0.32 "
            "return_sampling_mask: Model Runner V2 on GPU, requests need top_k > 0); algorithm.sampling_support=replay "
            "needs it with vllm. The hf backend always returns the set."
        ),
    )
    weight_sync: Literal["disk", "nccl", "auto"] = Field(
        "disk",
        description="How trained weights reach the engines after each optimizer step: 'disk' = safetensors in "
        "a shared folder, reloaded by every engine (CPU and GPU); 'nccl' = vLLM's NCCL weight transfer (GPU servers); "
        "'auto' (swerl train) = nccl where every server runs on the trainer's node and CUDA, NCCL and vLLM's transfer "
        "are there, else disk (trainer/setup/sync_auto.py; the dry-run and the run log say which and why).",
    )
    weight_sync_dir: str | None = Field(
        None, description="disk sync: the folder every engine reads the new weights from (one run's own: folders "
        "of older versions in it are removed); None = RUN_DIR/weight_sync."
    )
    weight_sync_address: str | None = Field(
        None, description="nccl sync (auto: read when it chooses nccl): the address at which the servers' workers "
        "reach this node's trainer ranks (their rendezvous; set per node, e.g. --set generator.weight_sync_address=$(hostname -i)); None = 127.0.0.1 "
        "for servers swerl starts on the node, this host's name for server_urls."
    )
    request_timeout_s: float = Field(600.0, gt=0, description="servers: per-request timeout, seconds.")

    @model_validator(mode="after")
    def _consistent(self) -> VLLMGenerator:
        if self.cpu_cores is not None and len(self.cpu_cores) < self.num_engines:
            raise ValueError(f"cpu_cores lists {len(self.cpu_cores)} core sets for {self.num_engines} engines: add "
                             "one per engine")
        servers = ("num_servers", "server_urls", "server_start_timeout_s")  # an in-process engine has no server
        stray = set_fields(self, servers) if self.vllm_mode == "inprocess" else []
        if stray:
            raise ValueError(f"{stray[0]} is only read with vllm_mode=servers: remove it or set vllm_mode=servers")
        if self.weight_sync_address and self.weight_sync == "disk":
            raise ValueError("weight_sync_address is only read with weight_sync=nccl (or auto): remove it")
        return self

    @property
    def num_engines(self) -> int:
        """vLLM engines this config drives per rank: 1 in-process, else the servers started or named."""
        return 1 if self.vllm_mode == "inprocess" else len(self.server_urls) or self.num_servers

    def resolved_dtype(self) -> str:
        """The dtype actually used: ``dtype``, else bfloat16."""
        return self.dtype or "bfloat16"

    def resolved_max_num_batched_tokens(self, on_cpu: bool) -> int:
        """Tokens per scheduler step of an engine on CPU (``on_cpu``) or on a GPU: ``max_num_batched_tokens``,
        else :data:`CPU_MAX_NUM_BATCHED_TOKENS` or :data:`GPU_MAX_NUM_BATCHED_TOKENS`."""
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        return CPU_MAX_NUM_BATCHED_TOKENS if on_cpu else GPU_MAX_NUM_BATCHED_TOKENS



class OpenAIGenerator(_Generator):
    """Any OpenAI-compatible server (evaluation only: it cannot receive trained weights)."""

    backend: Literal["openai"] = "openai"
    base_url: str = Field(..., description="Server root, e.g. http://127.0.0.1:8000/v1.")
    tokenizer: str | None = Field(
        None, description="Local HF folder or .gguf whose tokenizer the served model uses (chat template)."
    )
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    openai_endpoint: Literal["completions", "chat"] = Field(
        "completions", description="/completions with token-id prompts, or /chat/completions with messages."
    )
    request_timeout_s: float = Field(600.0, gt=0, description="Per-request timeout, seconds.")
    max_batch_size: int = Field(8, ge=1, description="Requests in flight (async batcher).")
    batch_wait_s: float = Field(0.05, ge=0, description="How long the batcher waits to fill a batch, seconds.")


class AutoGenerator(BaseModel):
    """``backend: auto`` (``swerl train`` only): one candidate config per backend it may choose, each
    validated as that backend's model; ``trainer/setup/auto.py`` keeps exactly one. Fields a candidate
    needs go in its own section (``hf:``, ``vllm:``)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["auto"] = "auto"
    hf: HFGenerator = Field(default_factory=HFGenerator, description="The generator when auto chooses hf.")
    vllm: VLLMGenerator = Field(default_factory=VLLMGenerator, description="The generator when auto chooses vllm.")

    def candidate(self, backend: str) -> HFGenerator | VLLMGenerator:
        """The candidate for ``backend`` (``hf`` or ``vllm``)."""
        return self.hf if backend == "hf" else self.vllm


def backend_of(value: object) -> str | None:
    """The ``backend`` tag of a generator section (a dict or a generator model; ``hf`` when a dict
    leaves it out); None for anything else (pydantic's error then)."""
    if isinstance(value, dict):
        return str(value.get("backend", "hf"))
    return value.backend if isinstance(value, (_Generator, AutoGenerator)) else None


InferenceConfig = Annotated[
    Union[Annotated[HFGenerator, Tag("hf")], Annotated[VLLMGenerator, Tag("vllm")],
          Annotated[OpenAIGenerator, Tag("openai")]],
    Discriminator(backend_of, custom_error_type="backend", custom_error_message="backend must be hf, vllm or openai"),
]
"""A generator config: the model of the backend its ``backend`` names."""
TrainGenerator = Annotated[
    Union[Annotated[HFGenerator, Tag("hf")], Annotated[VLLMGenerator, Tag("vllm")],
          Annotated[OpenAIGenerator, Tag("openai")], Annotated[AutoGenerator, Tag("auto")]],
    Discriminator(backend_of, custom_error_type="backend", custom_error_message="backend must be hf, vllm, openai "
                  "or auto"),
]
"""``swerl train``'s generator section: a backend's config, or ``auto``'s candidates."""
BACKENDS: dict[str, type[BaseModel]] = {"hf": HFGenerator, "vllm": VLLMGenerator, "openai": OpenAIGenerator,
                                        "auto": AutoGenerator}
"""The model of each ``backend`` value (the union's members; error messages name a field's owners)."""

_ADAPTER: TypeAdapter[Any] = TypeAdapter(InferenceConfig)


def inference_config(**fields: object) -> HFGenerator | VLLMGenerator | OpenAIGenerator:
    """The generator config of ``fields`` (``backend`` picks the model; hf when left out).

    Raises:
        pydantic.ValidationError: an unknown ``backend``, a field that backend does not have, a bad value.
    """
    return _ADAPTER.validate_python(fields)
