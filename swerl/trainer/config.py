"""The one config of ``swerl train``: a pydantic ``TrainConfig`` loaded from YAML, with dotted
``--set a.b=v`` overrides, validated once here; the run plan that ``--dry-run`` prints.

Sub-configs of other stages are reused as they are: ``AgentConfig`` (protocol, limits,
sampling), ``SandboxConfig``, ``AlgorithmConfig``; the policy's section (``ModelConfig``,
``LoraConfig``) lives in ``model_config.py`` and is importable from here; the ``eval`` and
``logging.wandb`` / ``logging.mlflow`` sections live in ``sections.py``. Stage: ``trainer/``, ground
floor: this module imports no room of the trainer (every room reads it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, Field, Tag, ValidationError, field_validator, model_validator

from swerl.agent.config import AgentConfig
from swerl.errors import ConfigError
from swerl.fields import set_fields
from swerl.inference.config import BACKENDS, AutoGenerator, HFGenerator, OpenAIGenerator, TrainGenerator, VLLMGenerator
from swerl.rl.config import AlgorithmConfig
from swerl.sandbox.types import SandboxConfig
from swerl.text import did_you_mean
from swerl.trainer.model_config import LoraConfig, ModelConfig, StrictModel  # noqa: F401 - LoraConfig re-exported
from swerl.trainer.sections import EvalDuringTrainingConfig, MlflowConfig, WandbConfig
from swerl.task_health import QuarantineConfig


class DataConfig(StrictModel):
    """Where the tasks come from and in which order they are visited."""

    tasks: str = Field(..., description="Task source: a folder of Harbor task folders, or a .parquet/.jsonl of rows.")
    limit: int | None = Field(None, ge=1, description="Use only the first N tasks of the source (sorted by name), after `names`.")
    names: list[str] | None = Field(
        None, min_length=1, description="Use only tasks whose name matches one of these shell patterns (e.g. humaneval-00*)."
    )
    exclude: str | list[str] | None = Field(
        None, description="Tasks to leave out (after `names` and `limit`): the patch file `swerl tasks health` writes "
        "(task: reason lines), or a list of task-name shell patterns."
    )
    quarantine: QuarantineConfig | None = Field(
        None, description="Drop tasks the task health ledger flags from later epochs (None = off, as in the seed preset)."
    )
    shuffle: bool = Field(True, description="Visit tasks in a fresh seeded permutation every epoch.")
    seed: int | None = Field(None, description="Prompt-order seed; None = the top-level seed.")


class OptimizerConfig(StrictModel):
    """AdamW and its learning-rate schedule."""

    lr: float = Field(1e-6, gt=0, description="Peak learning rate.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW (beta1, beta2).")
    eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    weight_decay: float = Field(0.0, ge=0, description="Decoupled weight decay.")
    grad_clip: float | None = Field(1.0, gt=0, description="Max global gradient L2 norm; None = no clipping.")
    schedule: Literal["constant", "cosine"] = Field("constant", description="LR after warmup: constant or cosine decay.")
    warmup_steps: int = Field(0, ge=0, description="Linear warmup from 0, in optimizer steps.")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="cosine: final LR as a fraction of lr.")
    max_consecutive_nonfinite_steps: int = Field(
        3, ge=1, description="A NaN/inf gradient skips its optimizer step; this many skipped in a row stop the run (exit 1)."
    )


class LoopConfig(StrictModel):
    """How many prompts, samples and optimizer steps a run takes."""

    train_batch_size: int = Field(4, ge=1, description="Prompts per training step (each sampled algorithm.n_samples_per_prompt times).")
    epochs: int = Field(1, ge=1, description="Passes over the task set.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many training steps (None = epochs' worth).")
    mini_batch_size: int | None = Field(
        None, ge=1, description="Prompts per optimizer step; None = train_batch_size (one optimizer step per training step)."
    )
    micro_batch_size: int = Field(1, ge=1, description="Trajectories per forward/backward on one rank (gradient accumulation).")
    update_epochs: int = Field(1, ge=1, description="Passes of optimizer steps over one training batch (PPO epochs).")
    rollout_concurrency: int | None = Field(
        None, ge=1, description="Episodes in flight at once for the whole run (each trainer rank runs its share, as "
        "with sandbox.concurrency and engine slots); None = sandbox.concurrency."
    )
    max_staleness_steps: int = Field(
        0, ge=0, description="Most training steps a trajectory's oldest turn may lag the weights it is trained from "
        "(seed run: 16). 0 = synchronous; k >= 1 = a producer collects later batches while the trainer updates (docs/async.md)."
    )
    exact_staleness: bool = Field(
        True, description="With max_staleness_steps = k >= 1: batch s is sampled entirely by the weights after "
        "max(s - 1 - k, resumed step) steps, applied between batches only, so a seeded run repeats and a resume "
        "continues bit for bit (staleness exactly k). false: the generator takes new weights as soon as they are "
        "published, mid-batch (staleness <= k, depends on timing; needed with generator.weight_sync=nccl)."
    )
    max_masked_fraction: float = Field(
        0.5, ge=0, le=1,
        description="A step whose fraction of masked rollouts (infrastructure failures) exceeds this counts towards max_masked_steps.",
    )
    max_masked_steps: int = Field(
        2, ge=1,
        description="Stop the run (exit 1, naming the dominant masked outcome) after this many consecutive steps over max_masked_fraction.",
    )

    @model_validator(mode="after")
    def _mini_divides(self) -> "LoopConfig":
        mini = self.mini_batch_size or self.train_batch_size
        if self.train_batch_size % mini:
            raise ValueError(
                f"mini_batch_size={mini} must divide train_batch_size={self.train_batch_size}: pick a divisor"
            )
        return self


class CheckpointConfig(StrictModel):
    """When full-state checkpoints and HF exports are written."""

    ckpt_interval: int = Field(1, ge=0, description="Save the full training state every N steps (0 = only at the end).")
    keep_last: int | None = Field(
        None, ge=1, description="Keep the N newest checkpoints; None = keep all. The newest is never deleted."
    )
    protect_steps: list[int] = Field(
        default_factory=list, description="Checkpoint steps keep_last never deletes (e.g. the one select-checkpoint chose)."
    )
    hf_save_interval: int = Field(0, ge=0, description="Write an HF export every N steps under exports/ (0 = only at the end).")
    export_merged: bool = Field(
        False, description="model.lora: also write the base with the adapters merged in (an HF folder, merged/ inside "
        "each export); the export itself is the peft adapter folder."
    )
    save_final: bool = Field(True, description="Also checkpoint and export the last step.")
    async_save: bool | Literal["auto"] = Field(
        "auto", description="Write checkpoints (DCP, torch.distributed.checkpoint.async_save) and full-weight HF exports "
        "in the background: each rank copies its shards to host memory at the step (rank 0 the whole export), a "
        "thread writes them while the next step trains, and the folder is renamed into place (committed) once written, "
        "before the next save, at the end and on a stop. auto = on when training on CUDA (one copy from GPU to host, the "
        "GPUs go on at once), off on CPU (the copy is a second whole state in the same RAM, and the writing thread "
        "takes cores from training and the sandboxes)."
    )


class LoggingConfig(StrictModel):
    """What the run writes besides checkpoints."""

    tensorboard: bool = Field(False, description="Also write metrics to RUN_DIR/tensorboard (SummaryWriter).")
    dump_trajectories: bool = Field(False, description="Write every trajectory to RUN_DIR/trajectories/step_N.jsonl.")
    wandb: WandbConfig | None = Field(
        None, description="Also log to Weights & Biases (offline by default: RUN_DIR/wandb); true = the defaults; "
        "None or false = off."
    )
    mlflow: MlflowConfig | None = Field(
        None, description="Also log to MLflow (a file store RUN_DIR/mlruns by default); true = the defaults; "
        "None or false = off."
    )

    @field_validator("wandb", "mlflow", mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        """``wandb: true`` / ``mlflow: true`` turn a tracker on with its defaults; ``false`` turns it off."""
        return {} if value is True else None if value is False else value

def sampling_support_problem(support: str, generator: TrainGenerator, top_k: int, top_p: float) -> str | None:
    """Why ``algorithm.sampling_support=replay`` cannot get each token's kept set from this generator
    (one line naming the fix), or None. The hf backend always returns it; vLLM in-process with
    ``return_sampling_mask`` and top_k > 0 (vLLM bounds the mask by top_k); vLLM servers' completions
    API returns none. Under ``auto`` only the vllm candidate's own rule (the resolved config gets the rest)."""
    vllm = generator.vllm if isinstance(generator, AutoGenerator) else generator
    if not isinstance(vllm, VLLMGenerator):
        return None
    if vllm.return_sampling_mask and top_k == 0:
        return ("generator.return_sampling_mask needs agent.top_k > 0 (vLLM refuses the request otherwise: it bounds "
                "each kept set by top_k): set agent.top_k (e.g. 20) or remove return_sampling_mask")
    if support != "replay" or vllm is not generator:
        return None
    truncated = top_k > 0 or top_p < 1.0
    if vllm.vllm_mode == "servers" and truncated:
        return ("algorithm.sampling_support=replay needs each token's kept set, which vLLM servers' completions API does "
                "not return: use generator.vllm_mode=inprocess with generator.return_sampling_mask=true, "
                "generator.backend=hf, or sampling_support=full")
    if truncated and not vllm.return_sampling_mask:
        return ("algorithm.sampling_support=replay with generator.backend=vllm needs the engine's kept sets: set "
                "generator.return_sampling_mask=true (or sampling_support=full)")
    return None


class TrainConfig(StrictModel):
    """Everything ``swerl train`` needs; see ``examples/*.yaml``."""

    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy being trained.")
    data: DataConfig = Field(..., description="Task source and prompt order.")
    generator: TrainGenerator = Field(
        default_factory=HFGenerator,
        description="Inference backend that samples rollouts on every rank (hf, or vllm in-process / servers, or auto: "
        "the one of the two this machine runs faster, each with its own section), its weight sync and parity probe; "
        "its model is model.path, leave generator.model unset.",
    )
    agent: AgentConfig = Field(default_factory=AgentConfig, description="Agent protocol, episode limits, sampling (temperature, top-p, top-k).")
    sandbox: SandboxConfig = Field(
        default_factory=SandboxConfig, description="Docker sandboxes: concurrency, limits, warm pool; concurrency, "
        "warm_pool_size and engine slots are the run's totals, split over the trainer ranks.")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="Advantages, policy loss, TIS, loss reduction (rl stage).")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="AdamW and the LR schedule.")
    loop: LoopConfig = Field(default_factory=LoopConfig, description="Prompts per step, epochs, steps, mini/micro-batches.")
    checkpointing: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoint and HF export intervals, retention.")
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="TensorBoard, W&B, trajectory dumps.")
    eval: EvalDuringTrainingConfig | None = Field(
        None, description="Held-out evaluation during training (eval/pass@1, eval/pass@k, eval/reward); None = off."
    )
    seed: int = Field(0, description="Seed of torch, numpy, python and (unless data.seed) the prompt order.")

    @model_validator(mode="after")
    def _consistent(self) -> "TrainConfig":
        if self.agent.temperature <= 0:
            raise ValueError(
                "agent.temperature must be > 0 for training (log-probs are taken at the sampling temperature): set e.g. 0.7"
            )
        if isinstance(self.generator, OpenAIGenerator):
            raise ValueError("generator.backend=openai cannot receive trained weights: use hf, vllm or auto")
        auto = isinstance(self.generator, AutoGenerator)
        for generator in (self.generator.hf, self.generator.vllm) if auto else (self.generator,):
            problem = self._generator_problem(generator, f"generator.{generator.backend}" if auto else "generator")
            if problem is not None:
                raise ValueError(problem)
        from swerl.trainer.colocation import colocation_problem

        # device auto: the GPU half is checked again once the run knows its device (trainer/rollouts/generator.py)
        problem = colocation_problem(self.generator, self.loop.max_staleness_steps, self.model.device == "cuda")
        if problem is not None:
            raise ValueError(problem)
        problem = self._exact_problem()
        if problem is not None:
            raise ValueError(problem)
        if self.model.reference_cpu_offload and not self.algorithm.use_kl_loss:
            raise ValueError("model.reference_cpu_offload would be ignored: there is a reference policy only with "
                             "algorithm.use_kl_loss=true; remove it")
        if self.model.lora is not None and self.model.reference_cpu_offload:
            raise ValueError("model.reference_cpu_offload would be ignored: under model.lora the reference is the policy "
                             "with its adapters off (no copy to offload); remove it")
        if self.checkpointing.export_merged and self.model.lora is None:
            raise ValueError("checkpointing.export_merged merges LoRA adapters, and model.lora is off: remove it")
        if self.model.fsdp and isinstance(self.generator, HFGenerator):
            raise ValueError(
                "model.fsdp with generator.backend=hf: every rank generates with its own module, a sharded one cannot; use generator.backend=vllm"
            )
        problem = sampling_support_problem(self.algorithm.sampling_support, self.generator, self.agent.top_k,
                                           self.agent.top_p)
        if problem is not None:
            raise ValueError(problem)
        return self

    def _exact_problem(self) -> str | None:
        """Why the exact schedule (``loop.exact_staleness`` with k >= 1) cannot run this config,
        naming the fields and the fix; None when it can (or the schedule is off)."""
        if self.loop.max_staleness_steps == 0 or not self.loop.exact_staleness:
            return None
        auto = isinstance(self.generator, AutoGenerator)
        vllm = self.generator.vllm if auto else self.generator
        at = "generator.vllm" if auto else "generator"
        if isinstance(vllm, VLLMGenerator) and vllm.weight_sync == "nccl":
            return (f"{at}.weight_sync=nccl streams the trainer's live weights when the engines reload, so they cannot "
                    "wait for the batch that needs them: set loop.exact_staleness: false or weight_sync: disk")
        if isinstance(vllm, VLLMGenerator) and self.eval is not None and self.model.fsdp:
            return ("eval with loop.exact_staleness samples with the trainer's module (the engines hold an older "
                    "version), which model.fsdp shards: set loop.exact_staleness: false or remove eval")
        return None

    def _generator_problem(self, gen: HFGenerator | VLLMGenerator, at: str) -> str | None:
        """Why swerl train cannot use ``gen`` (the generator, or one of ``auto``'s candidates, whose
        section is ``at``), naming the field and the fix; None when it can."""
        if gen.model is not None and gen.model != self.model.path:
            return f"{at}.model must be unset (the generator samples from model.path): remove it"
        if gen.lora_adapter is not None:
            return (f"{at}.lora_adapter must be unset: swerl train syncs its own adapters (model.lora); to start from "
                    "an adapter, merge it into model.path first")
        if isinstance(gen, HFGenerator):  # it samples with the trained module itself
            why = {"device": "the generator runs on model.device", "dtype": "hf samples with the trained module itself, "
                   "in its dtype"}
            stray = set_fields(gen, why)
            return f"{at}.{stray[0]} would be ignored by swerl train ({why[stray[0]]}): remove it" if stray else None
        if gen.max_model_len < self.agent.limits.context_window_tokens:
            return (f"{at}.max_model_len={gen.max_model_len} is below agent.limits.context_window_tokens="
                    f"{self.agent.limits.context_window_tokens}: raise {at}.max_model_len")
        if gen.weight_sync == "nccl" and gen.vllm_mode != "servers":
            return f"{at}.weight_sync=nccl sends weights to vLLM servers: set {at}.vllm_mode=servers or weight_sync=disk"
        if gen.weight_sync == "nccl" and self.model.lora is not None:
            return (f"model.lora syncs the adapters through a folder the engines load (tens of MB): set "
                    f"{at}.weight_sync=disk")
        return None

    @property
    def n_samples(self) -> int:
        """Samples per prompt (the group size), from ``algorithm.n_samples_per_prompt``."""
        return self.algorithm.n_samples_per_prompt

    @property
    def data_seed(self) -> int:
        """The prompt-order seed."""
        return self.seed if self.data.seed is None else self.data.seed

    def to_yaml(self) -> str:
        """The resolved config as YAML (what ``RUN_DIR/config.yaml`` holds)."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def _unwrap(annotation: object) -> object:
    """The pydantic model inside ``X | None`` (or the annotation itself)."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if len(args) == 1:
        return args[0]
    return annotation


def _tagged(annotation: object) -> dict[str, Any]:
    """The members of a tagged union (``TrainGenerator``) by tag; {} for any other annotation."""
    members = [get_args(arg) for arg in get_args(annotation)]
    return {meta.tag: args[0] for args in members if len(args) == 2 and isinstance(meta := args[1], Tag)}


def _walk(keys: list[str] | tuple) -> tuple[tuple, type[BaseModel] | None]:
    """``keys`` without the tags pydantic puts after a tagged union (``generator.vllm.max_model_len``
    -> ``generator.max_model_len``), and the config class at their end (None inside a dict-typed
    field, or at a union whose member the keys do not name)."""
    model: object = TrainConfig
    path: list[Any] = []
    rest = list(keys)
    while rest:
        key = rest.pop(0)
        path.append(key)
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or key not in model.model_fields:
            model = None
            continue
        annotation = model.model_fields[key].annotation
        members = _tagged(annotation)
        model = members[rest.pop(0)] if members and rest and rest[0] in members else _unwrap(annotation)
    return tuple(path), model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _model_at(keys: list[str] | tuple) -> type[BaseModel] | None:
    """The config class at a dotted path below TrainConfig (see :func:`_walk`), or None."""
    return _walk(keys)[1]


def _unknown_key(where: tuple, key: str, model: type[BaseModel]) -> str:
    """Why ``key`` is refused in ``model``'s section ``where``: a field of another generator backend
    is named with the backend that has it; any other key gets a did-you-mean."""
    owners = [tag for tag, member in BACKENDS.items() if key in member.model_fields and tag != "auto"]
    section = ".".join(map(str, where))
    if model is AutoGenerator and owners:
        return f"a field of backend {' and '.join(owners)}: under backend auto it goes in {section}.{owners[0]}"
    if "backend" in model.model_fields and owners:
        backend = model.model_fields["backend"].default
        return (f"not a field of backend {backend!r} (a field of {' and '.join(owners)}): remove it, or set "
                f"{section}.backend to {owners[0]}")
    return f"unknown key; {did_you_mean(key, list(model.model_fields))}"


def _check_path(keys: list[str], raw: str) -> None:
    """Raise a one-line ConfigError when a dotted override path names no field."""
    for depth, key in enumerate(keys):
        parent = _model_at(keys[:depth])
        if parent is None:
            return  # inside a dict-typed field: any key is legal
        if key not in parent.model_fields:
            where = ".".join(keys[:depth]) or "the top level"
            raise ConfigError(
                f"--set {raw}: unknown key {'.'.join(keys[: depth + 1])!r} in {where}; "
                f"{did_you_mean(key, list(parent.model_fields))}"
            )


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` overrides (value parsed as YAML) to a raw config dict, in order.

    Raises:
        ConfigError: a malformed override or an unknown key path.
    """
    for raw in overrides:
        if "=" not in raw:
            raise ConfigError(f"--set {raw}: expected KEY=VALUE with a dotted key, e.g. optimizer.lr=1e-5")
        path, value = raw.split("=", 1)
        keys = path.strip().split(".")
        if not all(keys):
            raise ConfigError(f"--set {raw}: empty key segment in {path!r}")
        _check_path(keys, raw)
        node = data
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
            node = child
        try:
            node[keys[-1]] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {raw}: value is not valid YAML ({err.__class__.__name__})") from err
    return data


def _has_path(data: object, keys: tuple) -> bool:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return False
        data = data[key]
    return True


def _blame(loc: tuple, msg: str, path: Path, file_data: dict, overrides: list[str]) -> str:
    """Where the failing value came from: the last ``--set`` on, inside or named by the error,
    else the file when it holds ``loc``, else a default value of the model."""
    dotted = ".".join(map(str, loc))
    keys = [(raw, raw.split("=", 1)[0].strip()) for raw in reversed(overrides)]
    for raw, key in keys:
        if loc and (key == dotted or key.startswith(dotted + ".") or dotted.startswith(key + ".")):
            return f"--set {raw}"
    for raw, key in keys:
        if key in msg or key.rsplit(".", 1)[-1] in msg:
            return f"--set {raw}"
    if not loc or _has_path(file_data, loc):
        return str(path)
    return f"{path} (default value of {dotted})"


# pydantic's error types for a value of the wrong numeric type: what the field expects, an example.
_EXPECTED = {"int": ("an integer", 3), "float": ("a number", 0.5), "bool": ("true or false", True)}


def _expected_value(loc: tuple, error_type: str, model: type[BaseModel] | None) -> str | None:
    """``expected an integer, e.g. 3`` for a numeric/boolean type error, the example being the
    field's default when it has one of that type; None for any other error."""
    kind = error_type.split("_", 1)[0]
    if kind not in _EXPECTED or not error_type.endswith(("_type", "_parsing", "_from_float")):
        return None
    expected, example = _EXPECTED[kind]
    field = model.model_fields.get(str(loc[-1])) if model is not None and loc else None
    default = getattr(field, "default", None)
    if type(default) is type(example):  # a bool is not an integer example, nor an integer a number one
        example = default
    shown = str(example).lower() if isinstance(example, bool) else str(example)
    return f"expected {expected}, e.g. {shown}"


_BOUNDS = {"greater_than_equal": ("ge", ">="), "greater_than": ("gt", ">"), "less_than_equal": ("le", "<="),
           "less_than": ("lt", "<")}


def _bound(loc: tuple, error: dict, model: type[BaseModel] | None) -> str | None:
    """``must be >= 1 (or null); got -1: set loop.max_steps to 1 or more`` for a value out of a
    field's bounds; None for any other error."""
    if error["type"] not in _BOUNDS:
        return None
    name, op = _BOUNDS[error["type"]]
    limit = (error.get("ctx") or {}).get(name)
    field = model.model_fields.get(str(loc[-1])) if model is not None and loc else None
    nullable = field is not None and field.default is None and not field.is_required()
    where = ".".join(map(str, loc))
    fix = {">=": f"{limit} or more", ">": f"more than {limit}", "<=": f"{limit} or less", "<": f"less than {limit}"}[op]
    return f"must be {op} {limit}{' (or null)' if nullable else ''}; got {error['input']!r}: set {where} to {fix}"


def _error_line(error: dict, path: Path, file_data: dict, overrides: list[str]) -> str:
    """One pydantic error as ``source: field: reason``, the reason naming the fix where pydantic's does not."""
    loc, _ = _walk(error["loc"])
    parent = _model_at(error["loc"][:-1])
    where = ".".join(str(p) for p in loc) or "(top level)"
    msg = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden" and parent is not None:
        msg = _unknown_key(loc[:-1], str(loc[-1]), parent)
    elif error["type"] == "missing":
        return f"{path}: {where}: required field missing: add it to the file"
    elif (expected := _expected_value(loc, error["type"], parent)) is not None:
        msg = f"{expected}; got {error['input']!r}"
    elif (bound := _bound(loc, error, parent)) is not None:
        msg = bound
    return f"{_blame(loc, msg, path, file_data, overrides)}: {where}: {msg}"


def _validation_error(path: Path, err: ValidationError, file_data: dict, overrides: list[str]) -> ConfigError:
    """A one-line ConfigError for the first error, counting the others, which it carries as
    ``details`` (``-v`` prints them). An unknown key comes first, before a missing one: a
    misspelled required section is both."""
    errors = err.errors()
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")  # stable: pydantic's order otherwise
    lines = [_error_line(e, path, file_data, overrides) for e in errors]
    more = f" (+{len(lines) - 1} more; -v shows them)" if len(lines) > 1 else ""
    return ConfigError(lines[0] + more, details=lines[1:])


def _forced_backend(file_data: dict, data: dict) -> dict:
    """``data`` where ``--set generator.backend=hf`` (or ``vllm``) overrides a file's ``backend: auto``:
    the generator becomes that backend's section of the file (``generator.hf`` / ``generator.vllm``),
    as ``auto`` choosing it would have made it, with any other ``generator.*`` override on top."""
    before, after = file_data.get("generator"), data.get("generator")
    if not (isinstance(before, dict) and isinstance(after, dict) and before.get("backend") == "auto"):
        return data
    backend = after.get("backend")
    if backend not in ("hf", "vllm"):
        return data
    rest = {key: value for key, value in after.items() if key not in ("hf", "vllm")}
    return {**data, "generator": {**(after.get(backend) or {}), **rest}}


def load_train_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML config, apply ``--set`` overrides and validate.

    Raises:
        ConfigError: missing/unreadable file, bad YAML, unknown field, illegal value (one line,
            naming the file and the field).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config ({err.strerror}): pass an existing YAML file") from err
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} invalid YAML: fix the syntax") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections (model, data, loop, ...)")
    import copy

    file_data = copy.deepcopy(data)
    data = _forced_backend(file_data, apply_overrides(data, overrides or []))
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as err:
        raise _validation_error(path, err, file_data, overrides or []) from err
