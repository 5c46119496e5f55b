"""What an episode samples from: a ``Policy`` maps prompt ids to one :class:`Generation`.

``BackendPolicy`` goes through the inference stage's async batcher (training and eval);
``ScriptedPolicy`` replays fixed replies through the real tokenizer (tests, demos).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from swerl.inference.backends.base import Generation, SamplingParams

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from swerl.inference.backends.batcher import AsyncBatcher, RequestStream


@runtime_checkable
class Policy(Protocol):
    """An async sampler over token ids with the tokenizer whose chat template it speaks."""

    tokenizer: PreTrainedTokenizerBase

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        """Sample one assistant turn conditioned on exactly ``prompt_ids`` ((P,) ids)."""
        ...


class BackendPolicy:
    """A policy served by an inference batcher (``swerl.inference`` ``AsyncBatcher``).

    Args:
        batcher: any object with ``async generate(prompt_ids, sampling) -> Generation``.
        tokenizer: the model's tokenizer (chat template, decode).
    """

    def __init__(self, batcher: AsyncBatcher | RequestStream, tokenizer: PreTrainedTokenizerBase):
        self.batcher = batcher
        self.tokenizer = tokenizer

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        return await self.batcher.generate(list(prompt_ids), sampling)


class ScriptedPolicy:
    """Replays fixed assistant replies, in order, as if a model had sampled them.

    Each reply is either text (encoded with the real tokenizer, then the end-of-turn id is
    appended) or a list of token ids (used verbatim, e.g. a tokenization that does not
    survive a decode/encode round trip). Log-probs are 0.0 per id. A reply longer than
    ``sampling.max_new_tokens`` is cut there with finish reason ``length``. After the last
    reply the policy keeps returning it.

    Attributes:
        prompts: every ``prompt_ids`` it was called with, in order (what it was conditioned on).
    """

    def __init__(self, replies: list[str | list[int]], tokenizer: PreTrainedTokenizerBase, end_token_id: int | None = None):
        if not replies:
            raise ValueError("ScriptedPolicy needs at least one reply")
        self.replies = list(replies)
        self.tokenizer = tokenizer
        if end_token_id is None:
            im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
            end_token_id = im_end if isinstance(im_end, int) and im_end >= 0 else tokenizer.eos_token_id
        self.end_token_id = end_token_id
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        reply = self.replies[min(len(self.prompts), len(self.replies) - 1)]
        self.prompts.append(list(prompt_ids))
        if isinstance(reply, str):
            ids = [*self.tokenizer.encode(reply, add_special_tokens=False), self.end_token_id]
        else:
            ids = list(reply)
        finish = "stop"
        if len(ids) > sampling.max_new_tokens:
            ids, finish = ids[: sampling.max_new_tokens], "length"
        return Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish)
