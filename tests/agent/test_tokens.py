"""Token-in/token-out bookkeeping with the real SmolLM2 tokenizer and a tiny random model."""

from __future__ import annotations

import asyncio
import copy

import pytest

from swerl.agent.tokens import ChatFormat, TokenRecord
from swerl.inference.backends.base import Generation, SamplingParams
from swerl.inference.backends.hf import HFBackend

ODD_OBSERVATIONS = [
    "New Terminal Output:\n\tcafe\u0301  \u00a0x\r\n  \u200b\U0001F600 trailing   \n\n\n",
    "ls\u2028 -la \u3000 \u00e9\u0301 \t\t \ufeff end",
]


def test_first_prompt_is_the_template_text(smol_tokenizer):
    chat = ChatFormat(smol_tokenizer)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi  there\t!"}]
    ids = chat.prompt_ids(messages)
    assert smol_tokenizer.decode(ids) == chat.render(messages, add_generation_prompt=True)
    assert smol_tokenizer.decode(ids).endswith("<|im_start|>assistant\n")


def test_observation_delta_rebuilds_the_full_template_render(smol_tokenizer):
    chat = ChatFormat(smol_tokenizer)
    messages = [{"role": "user", "content": "task"}]
    record = TokenRecord(prompt_ids=chat.prompt_ids(messages))
    end = smol_tokenizer.convert_tokens_to_ids("<|im_end|>")
    for i, obs in enumerate(ODD_OBSERVATIONS):
        reply = f"reply {i}"
        ids = [*smol_tokenizer.encode(reply, add_special_tokens=False), end]
        record.add_generation(Generation(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop"))
        messages.append({"role": "assistant", "content": reply})
        new = [{"role": "user", "content": obs}]
        record.add_observation(chat.observation_ids(new, ids[-1]))
        messages.extend(new)
    # Decoding the recorded ids gives exactly what the template renders for the whole chat.
    assert smol_tokenizer.decode(record.context_ids()) == chat.render(messages, add_generation_prompt=True)
    assert len(record.loss_mask) == len(record.response_ids) == len(record.logprobs)
    assert record.logprobs[0] == -0.5


def test_a_turn_cut_by_the_budget_gets_the_end_of_turn_from_the_template(smol_tokenizer):
    chat = ChatFormat(smol_tokenizer)
    text = chat.observation_text([{"role": "user", "content": "more"}], last_generated_id=None)
    assert text == "<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n"
    end = smol_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert chat.observation_text([{"role": "user", "content": "more"}], end).startswith("\n<|im_start|>user")


class _BackendAdapter:
    """The async policy face of a real HFBackend (one request per call)."""

    def __init__(self, backend: HFBackend):
        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        self.prompts.append(list(prompt_ids))
        return self.backend.generate([prompt_ids], sampling)[0]


def test_policy_sees_exactly_the_recorded_ids_with_a_random_model(smol_tokenizer, tiny_model):
    chat = ChatFormat(smol_tokenizer)
    policy = _BackendAdapter(HFBackend(tiny_model, smol_tokenizer, seed=3))
    record = TokenRecord(prompt_ids=chat.prompt_ids([{"role": "user", "content": "solve  it\u00a0 \u00e9"}]))
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, stop_token_ids=sorted(chat.stop_token_ids))
    generated = 0
    for obs in [*ODD_OBSERVATIONS, "third"]:
        gen = asyncio.run(policy.generate(record.context_ids(), sampling))
        record.add_generation(gen)
        generated += len(gen.token_ids)
        record.add_observation(chat.observation_ids([{"role": "user", "content": obs}], gen.token_ids[-1]))
    gen = asyncio.run(policy.generate(record.context_ids(), sampling))
    record.add_generation(gen)
    generated += len(gen.token_ids)

    last = policy.prompts[-1]
    assert last == record.prompt_ids + record.response_ids[: len(last) - len(record.prompt_ids)]
    assert record.response_ids[len(last) - len(record.prompt_ids):] == gen.token_ids
    # The random ids do not survive decode -> encode: rebuilding from text would have differed.
    round_trip = smol_tokenizer.encode(smol_tokenizer.decode(last), add_special_tokens=False)
    assert round_trip != last
    assert sum(record.loss_mask) == generated
    assert len(record.loss_mask) > generated  # observation ids carry mask 0


# A Qwen3-like template (written for this test): earlier assistant turns lose their
# <think> block when re-rendered, tool results are grouped into one user turn, and
# enable_thinking=False pre-fills an empty think block in the generation prompt.
QWEN3_LIKE_TEMPLATE = (
    "{%- if tools %}{{ '<|im_start|>system\\n# Tools\\n' + (tools | tojson) + '<|im_end|>\\n' }}{% endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{%- set c = m.content -%}"
    "{%- if '</think>' in c and not loop.last %}{% set c = c.split('</think>')[-1].lstrip('\\n') %}{% endif -%}"
    "{{ '<|im_start|>assistant\\n' + c + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{% endif -%}"
    "{{ '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{% endif -%}"
    "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}"
    "{%- endif -%}"
)


@pytest.fixture
def qwen3_like_tokenizer(smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)
    tok.chat_template = QWEN3_LIKE_TEMPLATE
    return tok


def test_thinking_stays_in_the_history_a_rerender_would_drop(qwen3_like_tokenizer):
    tok = qwen3_like_tokenizer
    chat = ChatFormat(tok, {"enable_thinking": True})
    messages = [{"role": "user", "content": "task"}]
    record = TokenRecord(prompt_ids=chat.prompt_ids(messages))
    reply = "<think>\nsecret reasoning\n</think>\n\n{\"commands\": []}"
    ids = [*tok.encode(reply, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]
    record.add_generation(Generation(token_ids=ids, logprobs=None, finish_reason="stop"))
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "output"}]
    record.add_observation(chat.observation_ids(messages[-1:], ids[-1]))
    context = tok.decode(record.context_ids())
    assert "secret reasoning" in context  # what the policy saw and what training sees
    assert "secret reasoning" not in chat.render(messages, add_generation_prompt=True)
    assert context.endswith("<|im_start|>user\noutput<|im_end|>\n<|im_start|>assistant\n")
    assert record.has_logprobs is False


def test_thinking_off_prefills_an_empty_think_block_every_turn(qwen3_like_tokenizer):
    chat = ChatFormat(qwen3_like_tokenizer, {"enable_thinking": False})
    assert qwen3_like_tokenizer.decode(chat.prompt_ids([{"role": "user", "content": "t"}])).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert chat.observation_text([{"role": "user", "content": "o"}], None).endswith("<think>\n\n</think>\n\n")


def test_tool_results_of_one_turn_form_one_user_message(qwen3_like_tokenizer):
    chat = ChatFormat(qwen3_like_tokenizer, tools=[{"type": "function", "function": {"name": "bash"}}])
    end = qwen3_like_tokenizer.convert_tokens_to_ids("<|im_end|>")
    text = chat.observation_text([{"role": "tool", "content": "A"}, {"role": "tool", "content": "B"}], end)
    assert text == ("\n<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response>"
                    "<|im_end|>\n<|im_start|>assistant\n")
    assert chat.supports_tools and "# Tools" in chat.render([{"role": "user", "content": "x"}], True)
