"""terminus-2's context summarization (``on_context_full: summarize``) in real sandboxes.

The first test replays the replies of Harbor's golden "hello-world context summarization"
episode (``tests/golden/terminus_2/hello-world-context-summarization.*`` in
harbor-framework/harbor): three setup commands, the summary, five questions, the answers,
then printf, cat and the two completions. Harbor forces its handoff with a fake
"context length exceeded"; here the third reply carries a long analysis, so that fewer than
``proactive_summarization_threshold_tokens`` are free after it and the proactive rule hands
off, dropping that reply's pending output as terminus-2 does. Texts normalized as in the
golden test (container id, blank-line runs).
"""

from __future__ import annotations

import asyncio

import pytest

from swerl.agent.config import AgentConfig, EpisodeLimits
from swerl.agent.episode import run_episode
from swerl.agent.policy import ScriptedPolicy
from swerl.agent.protocols.terminus_texts import (
    ANSWER_REQUEST_TEMPLATE,
    HANDOFF_TEMPLATE,
    QUESTION_PROMPT_TEMPLATE,
    SUMMARY_PROMPT_TEMPLATE,
)
from swerl.agent.tokens import ChatFormat
from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.trainer.step.batch import rows_from_trajectory
from tests.agent.test_episode import humaneval_task, terminus, write_file_keys  # noqa: F401 (fixture)
from tests.agent.test_terminus2_golden import INSTRUCTION, PROMPT_LINE, hello_world_task, normalize

pytestmark = pytest.mark.docker

FILLER = "The files are where the plan expects them. " * 160  # ~1,450 tokens: fills the window
SUMMARY = ("I have been working on creating hello.txt.\n\n1. **Major Actions Completed**:\n"
           "   - Created test_dir, file1.txt and file2.txt\n\n4. **Current Status**:\n"
           "   - Still need to create hello.txt in /app/")
QUESTIONS = ("I have the following questions about the current state:\n\n1. What is in test_dir?\n"
             "2. What do file1.txt and file2.txt contain?\n3. Has hello.txt been created yet?\n"
             "4. Are there any errors?\n5. What is the exact task requirement?")
ANSWERS = ("Here are the answers:\n\n1. file1.txt and file2.txt\n2. test1 and test2\n3. No\n4. No errors\n"
           "5. Create hello.txt with \"Hello, world!\" as the content")
CONFIRM = ("Are you sure you want to mark the task as complete? This will trigger your solution to be graded and "
           "you won't be able to make any further corrections. If so, include \"task_complete\": true in your JSON "
           "response again.")
PRINTF = "printf 'Hello, world!\\n' > hello.txt\n"
BEFORE = [terminus(("mkdir test_dir\n", 0.1)), terminus(("echo 'test1' > test_dir/file1.txt\n", 0.1)),
          terminus(("echo 'test2' > test_dir/file2.txt\n", 0.1)).replace('"look"', f'"{FILLER}"')]
AFTER = [terminus((PRINTF, 0.1)), terminus(("cat hello.txt\n", 0.1)), terminus(done=True), terminus(done=True)]
REPLIES = [*BEFORE, SUMMARY, QUESTIONS, ANSWERS, *AFTER]
CFG = AgentConfig(protocol="terminus-json", on_context_full="summarize", proactive_summarization_threshold_tokens=2000,
                  limits=EpisodeLimits(context_window_tokens=4100, max_new_tokens_per_turn=1800))


def screen(*lines: str) -> str:
    return "".join(f"{PROMPT_LINE} {line}\n" for line in lines) + f"{PROMPT_LINE}\n\n"


def summarized_episode(task, tokenizer, replies=REPLIES, cfg=CFG):
    async def go():
        policy = ScriptedPolicy(replies, tokenizer)
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as manager:
            async with manager.sandbox(task) as sandbox:
                return await run_episode(task, sandbox, policy, cfg, group_id="g", sample_index=0), policy
    return asyncio.run(go())


def normalized(messages: list[dict]) -> list[dict]:
    return [{"role": m["role"], "content": normalize(m["content"])} for m in messages]


def user(text: str) -> dict:
    return {"role": "user", "content": normalize(text)}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def test_full_context_is_summarized_and_handed_off_as_terminus2_does(tmp_path, smol_tokenizer):
    traj, policy = summarized_episode(hello_world_task(tmp_path / "hello-world"), smol_tokenizer)
    assert (traj.end_reason, traj.outcome, traj.reward, traj.num_summarizations) == ("task_complete", "passed", 1.0, 1)
    assert [s.kind for s in traj.segments] == ["agent", "summary", "questions"]
    agent, summary, questions = traj.segments
    first = normalized(agent.messages)[0]

    # Before: three replies, two outputs; the third reply's output is never shown.
    assert normalized(agent.messages)[1:] == [
        assistant(BEFORE[0]), user(f"New Terminal Output:\n\n{screen('mkdir test_dir')}"),
        assistant(BEFORE[1]), user("New Terminal Output:\n\n" + screen("echo 'test1' > test_dir/file1.txt")),
        assistant(BEFORE[2])]
    # Step 1 and 3: the whole conversation, the summary request, the summary, the questions, the answers.
    summary_request = user(SUMMARY_PROMPT_TEMPLATE.format(instruction=INSTRUCTION))
    assert normalized(summary.messages) == [*normalized(agent.messages), summary_request, assistant(SUMMARY),
                                            user(ANSWER_REQUEST_TEMPLATE.format(questions=QUESTIONS)),
                                            assistant(ANSWERS)]
    # Step 2: a conversation of its own, with the visible screen after the third command.
    question_prompt = user(QUESTION_PROMPT_TEMPLATE.format(instruction=INSTRUCTION, summary=SUMMARY, screen=screen(
        "mkdir test_dir", "echo 'test1' > test_dir/file1.txt", "echo 'test2' > test_dir/file2.txt")))
    assert normalized(questions.messages) == [question_prompt, assistant(QUESTIONS)]
    # After: first prompt, question prompt, questions, handoff; then the episode goes on.
    assert normalized(traj.messages) == [
        first, question_prompt, assistant(QUESTIONS), user(HANDOFF_TEMPLATE.format(answers=ANSWERS)),
        assistant(AFTER[0]), user(f"New Terminal Output:\n\n{screen(PRINTF.strip())}"),
        assistant(AFTER[1]), user(f"New Terminal Output:\n\n{PROMPT_LINE} cat hello.txt\nHello, world!\n{PROMPT_LINE}\n\n"),
        assistant(AFTER[2]), user(f"Current terminal state:\nNew Terminal Output:\n\n{PROMPT_LINE}\n\n{CONFIRM}"),
        assistant(AFTER[3])]

    # Token-in/token-out per segment: each call was conditioned on a prefix of its own segment,
    # whose prompt is the chat template over its first messages.
    chat = ChatFormat(smol_tokenizer, {"enable_thinking": False})
    sequences = traj.token_sequences()
    owners = [0, 0, 0, 1, 2, 1, 3, 3, 3, 3]  # which sequence each of the ten calls continued
    assert len(policy.prompts) == len(owners)
    for prompt, owner in zip(policy.prompts, owners):
        seq = sequences[owner]
        assert (seq.prompt_ids + seq.response_ids)[: len(prompt)] == prompt
    assert summary.prompt_ids == chat.prompt_ids([*agent.messages, summary.messages[len(agent.messages)]])
    assert questions.prompt_ids == chat.prompt_ids(questions.messages[:1])
    assert traj.prompt_ids == chat.prompt_ids(traj.messages[:4])


def test_segments_become_rows_with_the_episode_advantage(tmp_path, smol_tokenizer):
    traj, policy = summarized_episode(hello_world_task(tmp_path / "hello-world"), smol_tokenizer)
    rows = rows_from_trajectory(traj, 0.75, episode_index=3)
    assert len(rows) == 4 and {r.advantage for r in rows} == {0.75} and {r.episode_index for r in rows} == {3}
    end = policy.end_token_id
    generated = [[*smol_tokenizer.encode(r, add_special_tokens=False), end] for r in REPLIES]
    calls = [[0, 1, 2], [3, 5], [4], [6, 7, 8, 9]]  # replies sampled in each sequence, in order
    for row, replies in zip(rows, calls):
        assert row.response_ids[row.loss_mask].tolist() == [i for k in replies for i in generated[k]]
    assert sum(r.num_trainable_tokens for r in rows) == traj.num_generated_tokens


def test_a_summarized_humaneval_episode_still_earns_reward_1(humaneval_task, smol_tokenizer):  # noqa: F811
    task, solution = humaneval_task
    replies = [terminus((write_file_keys("/app/solution.py", solution), 0.5)),
               terminus(("python3 -c 'import solution'\n", 1.0)).replace('"look"', f'"{FILLER}"'),
               SUMMARY, QUESTIONS, ANSWERS, terminus(done=True), terminus(done=True)]
    cfg = CFG.model_copy(update={"limits": EpisodeLimits(context_window_tokens=4600, max_new_tokens_per_turn=1800)})
    traj, _ = summarized_episode(task, smol_tokenizer, replies, cfg)
    assert (traj.end_reason, traj.outcome, traj.reward, traj.num_summarizations) == ("task_complete", "passed", 1.0, 1)
    assert traj.messages[3]["content"].startswith("Here are the answers the other agent provided.")


def test_an_output_that_does_not_fit_is_dropped_and_the_context_summarized(tmp_path, smol_tokenizer):
    replies = [terminus(("head -c 7000 /dev/urandom | base64 -w 8\n", 0.5)), SUMMARY, QUESTIONS, ANSWERS, *AFTER[:1], *AFTER[2:]]
    cfg = CFG.model_copy(update={"proactive_summarization_threshold_tokens": 0,  # reactive only, as Harbor's test
                                 "limits": EpisodeLimits(context_window_tokens=6000, max_new_tokens_per_turn=1800)})
    traj, _ = summarized_episode(hello_world_task(tmp_path / "hello-world"), smol_tokenizer, replies, cfg)
    assert (traj.end_reason, traj.reward, traj.num_summarizations) == ("task_complete", 1.0, 1)
    agent = traj.segments[0]
    assert [m["role"] for m in agent.messages] == ["user", "assistant"]  # the output never entered
    assert traj.messages[3]["content"] == HANDOFF_TEMPLATE.format(answers=ANSWERS)
