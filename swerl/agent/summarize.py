"""terminus-2's context summarization: when the context fills, hand the task to a fresh
conversation built from a summary, questions and answers (``docs/terminus2.md``).

As ``terminus_2.py`` (harbor-framework/main, 2026-05-02) does it:

- **When**: proactively, before a turn, when fewer than
  ``proactive_summarization_threshold_tokens`` (8,000) are free; the pending observation is
  then never shown. Reactively, when the context is full: the conversation is first unwound
  (its last two messages dropped at a time, the first kept) until 4,000 tokens are free.
- **Three calls** of the policy: (1) the conversation plus the summary request; (2) a new
  conversation, the question prompt alone (task, summary, visible screen); (3) call 1's
  conversation plus its summary and the question-answering request.
- **New conversation**: the first prompt, the question prompt, the questions, then the
  handoff turn with the answers. An unwound conversation with no message left restarts
  from the bare instruction instead.
- **Failure** (a call cut at its token budget or without room in the window): proactive,
  the episode goes on as if nothing happened; reactive, the short-summary fallback (one
  call, no history), then the no-call fallback (instruction and the screen's tail), both
  appended to the unwound conversation.

Tokens: every new conversation's prompt is the chat template over its messages, rendered
once, and grows append-only from there (as the first prompt does). The summary request and
the answers request share one conversation, so they form one segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from swerl.agent.config import AgentConfig, EpisodeLimits
from swerl.agent.policy import Policy
from swerl.agent.protocols.terminus_texts import (
    ANSWER_REQUEST_TEMPLATE,
    HANDOFF_TEMPLATE,
    QUESTION_PROMPT_TEMPLATE,
    SCREEN_HANDOFF_TEMPLATE,
    SHORT_SUMMARY_HANDOFF_TEMPLATE,
    SHORT_SUMMARY_PROMPT_TEMPLATE,
    SUMMARY_PROMPT_TEMPLATE,
)
from swerl.agent.tokens import ChatFormat, TokenRecord
from swerl.agent.trajectory import Segment, SegmentKind
from swerl.inference.backends.base import Generation

if TYPE_CHECKING:
    from swerl.agent.protocols.terminus2 import Terminus2

UNWIND_TARGET_FREE_TOKENS = 4000
"""terminus-2 ``_unwind_messages_to_free_tokens(chat, target_free_tokens=4000)``."""
SCREEN_TAIL_CHARS = 1000
"""The fallbacks show ``current_screen[-1000:]``."""
SEED_STRIDE = 1_000_003
"""Summarization calls draw seeds far from the agent turns' ``seed + turn``."""


@dataclass
class Handoff:
    """The conversation an episode continues with, and what was sampled to build it.

    Attributes:
        messages: the new conversation's messages.
        prompt_ids: (P,) ids of its prompt (template over ``messages`` plus the assistant header).
        segments: the summarization calls' token sequences, in sampling order.
    """

    messages: list[dict]
    prompt_ids: list[int]
    segments: list[Segment] = field(default_factory=list)


class _CallFailed(Exception):
    """A summarization call was cut off or had no room (terminus-2: the LLM call raised)."""


class ContextSummarizer:
    """Runs terminus-2's handoff for one episode.

    Args:
        protocol: the episode's terminus-2 protocol (``instruction``, ``visible_screen``,
            ``reply_content``).
        chat: the episode's chat format.
        policy: what samples the summarization calls (the episode's policy).
        cfg: agent config (sampling, ``proactive_summarization_threshold_tokens``).
        limits: the episode's budgets (context window, per-call token budget).
        seed: the episode's seed (None = backend RNG).
    """

    def __init__(self, protocol: Terminus2, chat: ChatFormat, policy: Policy, cfg: AgentConfig, limits: EpisodeLimits,
                 seed: int | None):
        self.protocol, self.chat, self.policy, self.cfg, self.seed = protocol, chat, policy, cfg, seed
        self.max_new_tokens = limits.max_new_tokens_per_turn
        self.window = limits.context_window_tokens
        self.count = 0
        """Summarizations attempted (terminus-2's ``summarization_count``)."""
        self.weight_version = 0

    def is_due(self, context_tokens: int) -> bool:
        """Proactive rule: fewer than the threshold free before the next turn."""
        return self.window - context_tokens < self.cfg.proactive_summarization_threshold_tokens

    async def hand_off(self, messages: list[dict], reactive: bool) -> Handoff | None:
        """The new conversation replacing ``messages``, or None when a proactive summarization
        fails (the episode then goes on unchanged). A trailing user message is the prompt that
        did not fit: terminus-2 never added it to its chat, so it is not part of the history."""
        if messages and messages[-1]["role"] != "assistant":
            messages = messages[:-1]
        history = self._unwound(messages) if reactive else list(messages)
        instruction = self.protocol.instruction
        if not history:  # terminus-2 ``_summarize``: nothing to summarize, restart from the instruction
            start = [_user(instruction)]
            return Handoff(start, self.chat.prompt_ids(start))
        self.count += 1
        try:
            return await self._three_steps(history, instruction)
        except _CallFailed:
            if not reactive:
                return None
        return await self._fallback(history, instruction)

    async def _three_steps(self, history: list[dict], instruction: str) -> Handoff:
        """Summary, questions, answers; then the new conversation."""
        summary_request = _user(SUMMARY_PROMPT_TEMPLATE.format(instruction=instruction))
        summary = TokenRecord(prompt_ids=self.chat.prompt_ids([*history, summary_request]))
        summary_text = await self._sample(summary, 0)

        question_prompt = _user(QUESTION_PROMPT_TEMPLATE.format(
            instruction=instruction, summary=summary_text, screen=await self.protocol.visible_screen()))
        questions = TokenRecord(prompt_ids=self.chat.prompt_ids([question_prompt]))
        questions_text = await self._sample(questions, 1)

        answer_request = _user(ANSWER_REQUEST_TEMPLATE.format(questions=questions_text))
        summary.add_observation(self.chat.observation_ids([answer_request], summary.response_ids[-1]))
        answers_text = await self._sample(summary, 2)

        start = [history[0], question_prompt, _assistant(questions_text),
                 _user(HANDOFF_TEMPLATE.format(answers=answers_text))]
        summary_messages = [*history, summary_request, _assistant(summary_text), answer_request,
                            _assistant(answers_text)]
        return Handoff(start, self.chat.prompt_ids(start), [
            _segment("summary", summary, summary_messages),
            _segment("questions", questions, [question_prompt, _assistant(questions_text)]),
        ])

    async def _fallback(self, history: list[dict], instruction: str) -> Handoff:
        """terminus-2's fallbacks 2 and 3 after a failed reactive summarization."""
        screen_tail = (await self.protocol.visible_screen())[-SCREEN_TAIL_CHARS:]
        short_request = _user(SHORT_SUMMARY_PROMPT_TEMPLATE.format(instruction=instruction, screen_tail=screen_tail))
        short = TokenRecord(prompt_ids=self.chat.prompt_ids([short_request]))
        segments: list[Segment] = []
        try:
            text = await self._sample(short, 3)
            segments.append(_segment("summary", short, [short_request, _assistant(text)]))
            turn = _user(SHORT_SUMMARY_HANDOFF_TEMPLATE.format(instruction=instruction, summary=text))
        except _CallFailed:
            turn = _user(SCREEN_HANDOFF_TEMPLATE.format(instruction=instruction, screen_tail=screen_tail))
        start = [*history, turn]
        return Handoff(start, self.chat.prompt_ids(start), segments)

    def _unwound(self, messages: list[dict]) -> list[dict]:
        """Drop the last two messages until 4,000 tokens are free (the first one is kept)."""
        history = list(messages)
        while len(history) > 1 and self.window - self._num_tokens(history) < UNWIND_TARGET_FREE_TOKENS:
            history = history[:-2]
        return history

    def _num_tokens(self, messages: list[dict]) -> int:
        return len(self.chat.prompt_ids(messages)) if messages else 0

    async def _sample(self, record: TokenRecord, call: int) -> str:
        """One summarization call continuing ``record``; its reply's content (what terminus-2
        puts in the next prompts: without a leading think block when ``reasoning_split``).

        Raises:
            _CallFailed: no room left in the window, or the reply was cut at its budget.
        """
        room = self.window - record.num_tokens
        if room <= 0:
            raise _CallFailed
        max_new = min(self.max_new_tokens, room)
        seed = None if self.seed is None else self.seed + SEED_STRIDE * self.count + call
        generation: Generation = await self.policy.generate(
            record.context_ids(), self.cfg.sampling(max_new, sorted(self.chat.stop_token_ids), seed))
        if generation.finish_reason == "length":
            raise _CallFailed
        record.add_generation(generation)
        self.weight_version = generation.weight_version
        return self.protocol.reply_content(self.chat.decode_reply(generation.token_ids))


def _segment(kind: SegmentKind, record: TokenRecord, messages: list[dict]) -> Segment:
    return Segment(kind=kind, prompt_ids=record.prompt_ids, response_ids=record.response_ids,
                   loss_mask=record.loss_mask, rollout_logprobs=record.logprobs if record.has_logprobs else None,
                   rollout_support=record.rollout_support(), messages=messages)


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}
