"""Token-in/token-out bookkeeping of one episode (``docs/tasks.md``,
``docs/inference.md``).

The chat template is applied once, to the first messages, to get the prompt ids. After
that the record only grows: each assistant turn appends exactly the ids the policy
generated (loss mask 1, their sampling log-probs) and each observation appends the ids
of the template's text for the *new* messages only (loss mask 0). Earlier text is never
re-tokenized, so the ids the policy was conditioned on at every turn are a prefix of
``prompt_ids + response_ids``.

The observation delta comes from the template itself: render a fixed base conversation
that ends with a placeholder assistant message, then the same conversation plus the new
messages with the generation prompt, and keep the text after the placeholder. That text
is "end of the assistant turn + new messages + next assistant header"; the part of the
end-of-turn that the policy already generated (its stop token) is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from swerl.errors import InferenceError
from swerl.inference.backends.base import Generation

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_PLACEHOLDER = "\u2063SWERL_ASSISTANT_PLACEHOLDER\u2063"
_BASE_CONVERSATION = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
]


class ChatFormat:
    """Renders one tokenizer's chat template into prompt ids and observation deltas.

    Args:
        tokenizer: a transformers tokenizer with a ``chat_template``.
        template_kwargs: extra template variables (e.g. ``enable_thinking``).
        tools: JSON-schema tool list passed to templates that accept ``tools``.

    Raises:
        InferenceError: the tokenizer has no chat template, or the template does not
            render a conversation as an append-only string (no delta can be cut).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, template_kwargs: dict[str, Any] | None = None, tools: list[dict] | None = None):
        if not getattr(tokenizer, "chat_template", None):
            raise InferenceError("the model's tokenizer has no chat_template; use a chat/instruct model")
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.tools = tools
        self.stop_token_ids = _stop_token_ids(tokenizer)

    @property
    def supports_tools(self) -> bool:
        """True when the template reads a ``tools`` variable (Qwen3, Hermes, Llama 3.1...)."""
        return "tools" in (self.tokenizer.chat_template or "")

    def render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        """The template's text for ``messages`` (no tokenization)."""
        kwargs = dict(self.template_kwargs)
        if self.tools and self.supports_tools:
            kwargs["tools"] = self.tools
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` as a continuation (no BOS/EOS added; special tokens parsed)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """(P,) ids of the first prompt: the template over ``messages`` plus the assistant header."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def observation_text(self, new_messages: list[dict], last_generated_id: int | None) -> str:
        """Template text that follows a generated assistant turn when ``new_messages`` arrive.

        Args:
            new_messages: the user/tool messages of this observation (at least one).
            last_generated_id: last id of the assistant turn; when it is a stop token
                whose text opens the end-of-turn suffix, that text is not repeated.
        Returns:
            end-of-turn suffix (if not generated) + new messages + next assistant header.
        """
        base = [*_BASE_CONVERSATION, {"role": "assistant", "content": _PLACEHOLDER}]
        full = self.render([*base, *new_messages], add_generation_prompt=True)
        cut = full.find(_PLACEHOLDER)
        if cut < 0 or full.count(_PLACEHOLDER) != 1:
            raise InferenceError("chat template drops or repeats assistant content; cannot build observation deltas")
        delta = full[cut + len(_PLACEHOLDER):]
        if last_generated_id is not None and last_generated_id in self.stop_token_ids:
            stop_text = self.tokenizer.convert_ids_to_tokens(last_generated_id)
            if isinstance(stop_text, str) and delta.startswith(stop_text):
                delta = delta[len(stop_text):]
        return delta

    def observation_ids(self, new_messages: list[dict], last_generated_id: int | None) -> list[int]:
        """Ids of :meth:`observation_text`: tokenized alone, never with earlier text."""
        return self.encode(self.observation_text(new_messages, last_generated_id))

    def decode_reply(self, token_ids: list[int]) -> str:
        """Readable text of one generated turn (special tokens such as the stop id removed)."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)


def _stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Ids that end an assistant turn: EOS plus the template's end-of-turn token when known."""
    ids: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list):
        ids.update(i for i in eos if isinstance(i, int))
    for name in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        tid = tokenizer.convert_tokens_to_ids(name)
        unk = getattr(tokenizer, "unk_token_id", None)
        if isinstance(tid, int) and tid >= 0 and tid != unk:
            ids.add(tid)
    return ids


@dataclass
class TokenRecord:
    """The growing id sequence of one episode.

    Attributes:
        prompt_ids: (P,) first prompt ids.
        response_ids: (T,) generated and observation ids, in order.
        loss_mask: (T,) 1 on generated ids, 0 on observation ids.
        logprobs: (T,) sampling log-prob per generated id, 0.0 on observation ids.
        has_logprobs: False once any turn came back without log-probs.
        turn_weight_versions: the policy weight version of each generated turn, in order.
        support: (T,) the kept set each generated id was drawn from under top-k / top-p
            (``Generation.support``), ``[]`` on observation ids and on turns without one.
        has_support: True once any turn came back with kept sets.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    has_logprobs: bool = True
    turn_weight_versions: list[int] = field(default_factory=list)
    support: list[list[int]] = field(default_factory=list)
    has_support: bool = False

    @property
    def num_tokens(self) -> int:
        """P + T: the length of the context the next turn is conditioned on."""
        return len(self.prompt_ids) + len(self.response_ids)

    def context_ids(self) -> list[int]:
        """(P+T,) exactly the ids the next generation is conditioned on."""
        return [*self.prompt_ids, *self.response_ids]

    def add_generation(self, gen: Generation) -> None:
        """Append generated ids verbatim (loss mask 1) with their log-probs.

        Raises:
            InferenceError: log-probs present but not one per generated id.
        """
        if gen.logprobs is not None and len(gen.logprobs) != len(gen.token_ids):
            raise InferenceError(f"backend returned {len(gen.logprobs)} log-probs for {len(gen.token_ids)} ids")
        self.response_ids.extend(gen.token_ids)
        self.loss_mask.extend([1] * len(gen.token_ids))
        self.turn_weight_versions.append(gen.weight_version)
        if gen.logprobs is None:
            self.has_logprobs = False
            self.logprobs.extend([0.0] * len(gen.token_ids))
        else:
            self.logprobs.extend(float(x) for x in gen.logprobs)
        if gen.support is not None and len(gen.support) != len(gen.token_ids):
            raise InferenceError(f"backend returned {len(gen.support)} kept sets for {len(gen.token_ids)} ids")
        self.has_support = self.has_support or gen.support is not None
        kept = gen.support if gen.support is not None else [[] for _ in gen.token_ids]
        self.support.extend(list(ids) for ids in kept)

    def rollout_support(self) -> list[list[int]] | None:
        """The kept sets for the trajectory: ``support`` once any turn returned one, else None."""
        return list(self.support) if self.has_support else None

    def add_observation(self, ids: list[int]) -> None:
        """Append observation ids (loss mask 0, log-prob 0.0)."""
        self.response_ids.extend(ids)
        self.loss_mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))
        self.support.extend([] for _ in ids)
