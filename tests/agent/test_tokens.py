"""Token-in/token-out bookkeeping with the real SmolLM2 tokenizer and a tiny random model."""

from __future__ import annotations

import asyncio

from swerl.agent.tokens import ChatFormat, TokenRecord
from swerl.inference.base import Generation, SamplingParams
from swerl.inference.hf import HFBackend

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
