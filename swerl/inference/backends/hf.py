"""The reference generation backend: transformers ``generate`` (batched, left padding,
CPU or GPU) returning the exact log-prob of every sampled token.

Sampling is done by our own logits processor on top of greedy ``generate``: it turns the
raw logits into the processed distribution (:func:`sampling.processed_logprobs`: temperature,
top-k, top-p), records ``log mu`` of the token it draws with a per-row generator, and
hands ``generate`` a one-hot score so its argmax picks that token; under top-k / top-p it also
records the kept set the token was drawn from (``Generation.support``). So the recorded mu is
exactly the distribution sampled from (vLLM's ``processed_logprobs``), a row's draws do
not depend on its batch neighbours, and torch's global RNG is never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from swerl.errors import ConfigError, InferenceError
from swerl.inference.backends.base import Generation, SamplingParams
from swerl.inference.backends.sampling import finish_row, kept_sets, processed_logprobs, sample_rows, truncates
from swerl.logs import PhaseClock, phase

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class _SampleAndRecord(LogitsProcessor):
    """Last logits processor: samples from the processed distribution and records mu; each call
    (one token per row) advances ``clock``, the generate phase's count."""

    def __init__(self, sampling: SamplingParams, generators: list[torch.Generator] | None,
                 clock: PhaseClock | None = None) -> None:
        self.sampling = sampling
        self.generators = generators
        self.clock = clock
        self.chosen: list[Tensor] = []
        self.logprobs: list[Tensor] = []
        self.supports: list[Tensor] = []
        self.record_support = truncates(sampling.temperature, sampling.top_k, sampling.top_p)

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if self.clock is not None:
            self.clock.advance()
        sp = self.sampling
        logprobs = processed_logprobs(scores, sp.temperature, sp.top_k, sp.top_p)
        chosen = sample_rows(logprobs, self.generators)
        self.chosen.append(chosen)
        self.logprobs.append(logprobs.gather(-1, chosen[:, None]).squeeze(-1))
        if self.record_support:  # the exact set this filter kept (finite processed log-probs)
            self.supports.append(kept_sets(logprobs).cpu())
        one_hot = torch.full_like(scores, float("-inf"))
        return one_hot.scatter_(-1, chosen[:, None], 0.0)


class _StopStrings(StoppingCriteria):
    """Marks a row done once its decoded generated text contains a stop string."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stops: list[str], prompt_len: int, batch_size: int) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.prompt_len = prompt_len
        self.window = 2 * max(len(stop) for stop in stops) + 8  # tokens decoded per check
        self.hit_len: list[int | None] = [None] * batch_size

    def __call__(self, input_ids: Tensor, scores: Tensor, **kwargs: object) -> Tensor:
        generated = input_ids[:, self.prompt_len :]
        num_generated = generated.shape[1]
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for row in range(input_ids.shape[0]):
            if self.hit_len[row] is not None:
                done[row] = True
                continue
            text = self.tokenizer.decode(generated[row, -self.window :].tolist())
            if any(stop in text for stop in self.stops):
                self.hit_len[row] = num_generated
                done[row] = True
        return done


class HFBackend:
    """Batched generation with a transformers causal LM; implements ``GenerationBackend``.

    Attributes:
        model: the torch module generating (may be the trainer's live policy: no copy).
        tokenizer: its tokenizer (used for EOS/pad ids and stop strings).
        weight_version: bumped by :meth:`update_weights` / :meth:`set_model`.

    Seeds follow vLLM: a request with ``seed=s`` samples every row with a generator seeded
    with ``s`` (identical prompts with the same seed give identical samples); ``seed=None``
    draws per-row seeds from the backend's own generator (seeded at construction, state in
    :meth:`rng_state`), so generation never consumes torch's global RNG.
    """

    def __init__(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, *, seed: int = 0, weight_version: int = 0) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.weight_version = weight_version
        self._rng = torch.Generator().manual_seed(seed)

    @classmethod
    def from_pretrained(
        cls, path_or_gguf: str | Path | None = None, dtype: str = "float32", device: str = "cpu", seed: int = 0,
        adapter: str | Path | None = None,
    ) -> HFBackend:
        """Load an HF folder or GGUF file (None = the default SmolLM2 model, see ``models``), with the
        peft LoRA ``adapter`` folder on top when given (the adapters injected into its linears, as
        the trainer samples them; not merged: a bf16 merge would round small adapter deltas away).

        Raises:
            ConfigError: unknown dtype or model path, or an adapter folder peft cannot load.
            EnvironmentProblem: default model missing.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from swerl.inference.model_files import resolve_model

        if dtype not in DTYPES:
            raise ConfigError(f"inference dtype {dtype!r} is unknown; fix: use one of {sorted(DTYPES)}")
        folder = resolve_model(path_or_gguf)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dtype]).to(device)
        if adapter is not None:
            model = _with_adapter(model, Path(adapter))
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        return cls(model, tokenizer, seed=seed)

    # ---- weights -------------------------------------------------------------------------

    def set_model(self, module: nn.Module) -> None:
        """Generate with ``module`` from now on (no copy) and bump ``weight_version``."""
        self.model = module
        self.weight_version += 1

    def update_weights(self, named_tensors: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]]) -> int:
        """Copy tensors in place into the model's parameters/buffers, then bump ``weight_version``.

        Args:
            named_tensors: a state dict or iterable of (name, tensor), HF names; partial updates allowed.

        Returns:
            Number of tensors copied.

        Raises:
            InferenceError: an unknown name or a shape mismatch (nothing is half-applied:
                all names and shapes are checked before copying).
        """
        items = list(named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors)
        targets = dict(self.model.named_parameters(remove_duplicate=False))
        targets.update(dict(self.model.named_buffers(remove_duplicate=False)))
        for name, tensor in items:
            if name not in targets:
                raise InferenceError(f"update_weights: model has no parameter or buffer named {name!r}")
            if targets[name].shape != tensor.shape:
                raise InferenceError(
                    f"update_weights: {name} has shape {tuple(targets[name].shape)}, got {tuple(tensor.shape)}"
                )
        with torch.no_grad():
            for name, tensor in items:
                targets[name].copy_(tensor)
        self.weight_version += 1
        return len(items)

    def rng_state(self) -> Tensor:
        """State of the backend generator (for checkpoints); restore with :meth:`set_rng_state`."""
        return self._rng.get_state()

    def set_rng_state(self, state: Tensor) -> None:
        """Restore the backend generator saved by :meth:`rng_state`."""
        self._rng.set_state(state)

    # ---- generation ----------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        """Device of the model's first parameter (inputs are moved there)."""
        return next(self.model.parameters()).device

    def eos_token_ids(self) -> set[int]:
        """Token ids that always end a turn: the model's generation-config EOS and the tokenizer's."""
        ids: set[int] = set()
        config = getattr(self.model, "generation_config", None)
        configured = getattr(config, "eos_token_id", None)
        if configured is not None:
            ids.update(configured if isinstance(configured, list) else [configured])
        if getattr(self.tokenizer, "eos_token_id", None) is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def _pad_id(self, stop_ids: set[int]) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        return pad if pad is not None else min(stop_ids) if stop_ids else 0

    def _row_generators(self, seeds: list[int | None]) -> list[torch.Generator]:
        drawn = torch.randint(0, 2**62, (len(seeds),), generator=self._rng).tolist()
        return [
            torch.Generator(device=self.device).manual_seed(int(seed if seed is not None else fallback))
            for seed, fallback in zip(seeds, drawn, strict=True)
        ]

    def generate(
        self, prompts: list[list[int]], sampling: SamplingParams, seeds: list[int | None] | None = None
    ) -> list[Generation]:
        """Sample one continuation per prompt, batched with left padding.

        Args:
            prompts: B lists of token ids (unequal lengths allowed, none empty).
            sampling: temperature (0 = greedy), top_p, top_k, max_new_tokens, seed, stop, stop_token_ids.
            seeds: optional per-prompt seeds overriding ``sampling.seed`` (None entries draw
                from the backend generator); lets the batcher merge requests that differ only by seed.

        Returns:
            B generations in prompt order: ids (trimmed after the first stop token, which is
            kept, or after the token completing a stop string), float32 mu per token,
            finish reason, current ``weight_version``.

        Raises:
            InferenceError: an empty prompt, or non-finite log-probs for a sampled token.
        """
        if not prompts:
            return []
        if any(len(prompt) == 0 for prompt in prompts):
            raise InferenceError("generate: got an empty prompt; every prompt needs at least one token id")
        stop_ids = self.eos_token_ids() | set(sampling.stop_token_ids)
        pad_id = self._pad_id(stop_ids)
        input_ids, attention_mask = _left_pad(prompts, pad_id, self.device)
        if seeds is not None and len(seeds) != len(prompts):
            raise InferenceError(f"generate: got {len(seeds)} seeds for {len(prompts)} prompts")
        row_seeds = seeds if seeds is not None else [sampling.seed] * len(prompts)
        generators = None if sampling.temperature == 0 else self._row_generators(row_seeds)
        criteria = StoppingCriteriaList()
        stop_strings = None
        if sampling.stop:
            stop_strings = _StopStrings(self.tokenizer, sampling.stop, input_ids.shape[1], len(prompts))
            criteria.append(stop_strings)
        config = GenerationConfig(
            do_sample=False,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=sorted(stop_ids) or None,
            pad_token_id=pad_id,
            use_cache=True,
        )
        # A phase with a moving count: a batch holding every episode of a step finishes no episode
        # until it ends, so the heartbeat shows the tokens sampled per row so far.
        with phase(f"generate (batch of {len(prompts)})", total=sampling.max_new_tokens, unit="tokens/row") as clock:
            recorder = _SampleAndRecord(sampling, generators, clock)
            sequences = self._generate_neutral(input_ids, attention_mask, config, recorder, criteria)
        generated = sequences[:, input_ids.shape[1] :].tolist()
        logprobs = torch.stack(recorder.logprobs, dim=1).tolist() if recorder.logprobs else [[] for _ in prompts]
        hits = stop_strings.hit_len if stop_strings is not None else [None] * len(prompts)
        supports = _row_supports(recorder.supports, len(prompts))
        return [
            self._finish(ids, row_logprobs, stop_ids, hit, sampling.max_new_tokens, support)
            for ids, row_logprobs, hit, support in zip(generated, logprobs, hits, supports, strict=True)
        ]

    def _generate_neutral(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, config: GenerationConfig,
        recorder: _SampleAndRecord, criteria: StoppingCriteriaList,
    ) -> torch.Tensor:
        """``model.generate`` in eval mode under no_grad, with our processor and stopping criteria only.

        Returns: (B, prompt + new) token ids; the model's train mode and generation config are restored.
        """
        was_training = self.model.training
        # The model's own generation config (e.g. Qwen3's temperature/top-k, a repetition penalty)
        # would fill every unset field of ours and add processors before our sampler: swap in a
        # neutral one for the call, so mu is exactly our processed distribution.
        model_defaults = getattr(self.model, "generation_config", None)
        self.model.generation_config = GenerationConfig()
        self.model.eval()
        try:
            with torch.no_grad():
                return self.model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    generation_config=config,
                    logits_processor=LogitsProcessorList([recorder]),
                    stopping_criteria=criteria,
                )
        finally:
            self.model.train(was_training)
            self.model.generation_config = model_defaults

    def _finish(
        self, ids: list[int], logprobs: list[float], stop_ids: set[int], hit: int | None, budget: int,
        support: list[list[int]] | None = None,
    ) -> Generation:
        keep, reason = finish_row(ids, stop_ids, hit, budget)
        if reason == "length" and keep < budget:
            raise InferenceError(f"generate: a row ended after {keep} of {budget} tokens without a stop")
        row_logprobs = logprobs[:keep]
        if len(row_logprobs) != keep or not all(lp > float("-inf") and lp == lp for lp in row_logprobs):
            raise InferenceError("generate: missing or non-finite log-prob for a sampled token")
        return Generation(
            token_ids=ids[:keep], logprobs=row_logprobs, finish_reason=reason, weight_version=self.weight_version,
            support=None if support is None else support[:keep],
        )


def _row_supports(steps: list[Tensor], batch: int) -> list[list[list[int]] | None]:
    """Per row, the kept set of each generated token (-1 padding dropped), from the recorder's
    per-step (B, K) tensors; None per row when no support was recorded."""
    if not steps:
        return [None] * batch
    rows: list[list[list[int]]] = [[] for _ in range(batch)]
    for step in steps:
        for row, ids in enumerate(step.tolist()):
            rows[row].append([i for i in ids if i >= 0])
    return rows


def _with_adapter(model: nn.Module, adapter: Path) -> nn.Module:
    """``model`` with the peft LoRA adapter folder ``adapter`` injected into its linears (the
    transformers model inside the peft wrapper: its ``generate`` samples with the adapter).

    Raises:
        ConfigError: ``adapter`` is not a peft adapter folder, or its modules are not in ``model``.
    """
    from peft import PeftModel

    if not (adapter / "adapter_config.json").is_file():
        raise ConfigError(f"{adapter}: no adapter_config.json; fix: pass the folder PeftModel.save_pretrained wrote")
    try:
        return PeftModel.from_pretrained(model, str(adapter)).get_base_model()
    except (ValueError, KeyError, RuntimeError) as err:
        raise ConfigError(f"cannot apply the LoRA adapter {adapter}: {err}; fix: pass an adapter of this base model") from err


def _left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """(B, L) int64 ids left-padded with ``pad_id`` and the (B, L) int64 attention mask."""
    width = max(len(prompt) for prompt in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device)
