"""terminus-2's reactive summarization rules on their own: unwinding, the empty-history
restart and the fallbacks (a small stand-in protocol gives the instruction and screen; the
tokenizer and chat template are SmolLM2's)."""

from __future__ import annotations

import asyncio

from swerl.agent.config import AgentConfig, EpisodeLimits
from swerl.agent.policy import ScriptedPolicy
from swerl.agent.protocols.terminus_texts import SCREEN_HANDOFF_TEMPLATE, SHORT_SUMMARY_HANDOFF_TEMPLATE
from swerl.agent.summarize import UNWIND_TARGET_FREE_TOKENS, ContextSummarizer
from swerl.agent.tokens import ChatFormat


class ScreenProtocol:
    """What the summarizer reads of terminus-2: the instruction, the pane, a reply's content."""

    instruction = "Create hello.txt.\n"

    async def visible_screen(self) -> str:
        return "root@abc:/app# ls\n" + "x" * 1500

    def reply_content(self, reply: str) -> str:
        return reply


def summarizer(tokenizer, replies, window: int) -> tuple[ContextSummarizer, ScriptedPolicy]:
    policy = ScriptedPolicy(replies, tokenizer)
    limits = EpisodeLimits(context_window_tokens=window, max_new_tokens_per_turn=64)
    cfg = AgentConfig(on_context_full="summarize", limits=limits)
    chat = ChatFormat(tokenizer, {"enable_thinking": False})
    return ContextSummarizer(ScreenProtocol(), chat, policy, cfg, limits, seed=0), policy


def conversation(num_pairs: int, words: int) -> list[dict]:
    messages = [{"role": "user", "content": "first prompt"}, {"role": "assistant", "content": "reply 0"}]
    for i in range(1, num_pairs):
        messages += [{"role": "user", "content": "output " * words}, {"role": "assistant", "content": f"reply {i}"}]
    return messages


def test_reactive_unwinding_drops_message_pairs_until_4000_tokens_are_free(smol_tokenizer):
    s, _ = summarizer(smol_tokenizer, ["s"], window=UNWIND_TARGET_FREE_TOKENS + 700)
    messages = conversation(6, 300)  # each output ~300 tokens: two pairs must go
    kept = s._unwound(messages)
    assert kept == messages[: len(kept)] and len(kept) % 2 == 0 and len(kept) < len(messages)
    assert s.window - s._num_tokens(kept) >= UNWIND_TARGET_FREE_TOKENS
    assert s.window - s._num_tokens(messages[: len(kept) + 2]) < UNWIND_TARGET_FREE_TOKENS


def test_nothing_left_after_unwinding_restarts_from_the_bare_instruction(smol_tokenizer):
    s, policy = summarizer(smol_tokenizer, ["s"], window=UNWIND_TARGET_FREE_TOKENS + 10)
    handoff = asyncio.run(s.hand_off(conversation(2, 50), reactive=True))
    assert handoff.messages == [{"role": "user", "content": "Create hello.txt.\n"}]
    assert handoff.segments == [] and policy.prompts == [] and s.count == 0


def test_failed_proactive_summarization_changes_nothing(smol_tokenizer):
    s, _ = summarizer(smol_tokenizer, ["word " * 100], window=5000)  # the summary is cut at 64 tokens
    assert asyncio.run(s.hand_off(conversation(2, 10), reactive=False)) is None
    assert s.count == 1


def test_failed_reactive_summarization_falls_back_to_a_short_summary(smol_tokenizer):
    s, policy = summarizer(smol_tokenizer, ["word " * 100, "Next: write the file."], window=5000)
    history = conversation(2, 10)
    handoff = asyncio.run(s.hand_off(history, reactive=True))
    short = SHORT_SUMMARY_HANDOFF_TEMPLATE.format(instruction="Create hello.txt.\n", summary="Next: write the file.")
    assert handoff.messages == [*history, {"role": "user", "content": short}]
    assert [seg.kind for seg in handoff.segments] == ["summary"]
    request = handoff.segments[0].messages[0]["content"]
    assert request.startswith("Briefly continue this task: Create hello.txt.\n\n\nCurrent state: ")
    assert request.endswith("Current state: " + "x" * 1000 + "\n\nNext steps (2-3 sentences):")  # last 1,000 chars
    assert len(policy.prompts) == 2


def test_when_every_call_fails_the_screen_tail_is_handed_over(smol_tokenizer):
    s, _ = summarizer(smol_tokenizer, ["word " * 100], window=5000)
    history = conversation(2, 10)
    handoff = asyncio.run(s.hand_off(history, reactive=True))
    tail = ("root@abc:/app# ls\n" + "x" * 1500)[-1000:]
    assert handoff.messages[-1]["content"] == SCREEN_HANDOFF_TEMPLATE.format(instruction="Create hello.txt.\n",
                                                                              screen_tail=tail)
    assert handoff.segments == [] and handoff.prompt_ids == s.chat.prompt_ids(handoff.messages)


def test_a_first_prompt_that_does_not_fit_restarts_from_the_instruction(smol_tokenizer):
    s, policy = summarizer(smol_tokenizer, ["s"], window=5000)
    handoff = asyncio.run(s.hand_off([{"role": "user", "content": "first prompt"}], reactive=True))
    assert handoff.messages == [{"role": "user", "content": "Create hello.txt.\n"}] and policy.prompts == []
