"""Episodes end to end in real sandboxes: scripted replies through the real protocol parsers,
the real SmolLM2 tokenizer, real containers and the tasks' real verifiers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from swerl.agent.config import AgentConfig, EpisodeLimits
from swerl.agent.episode import run_episode
from swerl.agent.policy import ScriptedPolicy
from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.tasks.load import load_task

FIXTURE_TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"
run = asyncio.run

pytestmark = pytest.mark.docker

ADD_TWO = "def add_two(x):\n    return x + 2\n"


def terminus(*commands: tuple[str, float], done: bool = False) -> str:
    body = {"analysis": "look", "plan": "act", "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
            "task_complete": done}
    return json.dumps(body)


def write_file_keys(path: str, code: str) -> str:
    return f"cat > {path} << 'SWERL_EOF'\n{code}SWERL_EOF\n"


async def episode(task, replies, tokenizer, cfg: AgentConfig | None = None):
    policy = ScriptedPolicy(replies, tokenizer)
    async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as manager:
        async with manager.sandbox(task) as sandbox:
            traj = await run_episode(task, sandbox, policy, cfg or AgentConfig(), group_id="g", sample_index=0)
    return traj, policy


@pytest.fixture
def add_two():
    return load_task(FIXTURE_TASKS / "add-two")


@pytest.fixture
def humaneval_task(tmp_path: Path):
    from swerl.tasks.humaneval import import_humaneval, read_humaneval_problems

    folder = import_humaneval(tmp_path / "he", limit=1)[0]
    problem = read_humaneval_problems()[0]
    return load_task(folder), problem["prompt"] + problem["canonical_solution"]


def test_scripted_terminus_run_solves_a_humaneval_task(humaneval_task, smol_tokenizer):
    task, solution = humaneval_task
    replies = [
        terminus((write_file_keys("/app/solution.py", solution), 0.5), ("python3 -c 'import solution'\n", 1.0)),
        terminus(done=True),
        terminus(done=True),
    ]
    traj, _ = run(episode(task, replies, smol_tokenizer))
    assert (traj.end_reason, traj.outcome, traj.reward, traj.failure_class) == ("task_complete", "passed", 1.0, "none")
    assert traj.num_turns == 3
    assert "Are you sure you want to mark the task as complete?" in traj.messages[4]["content"]
    assert sum(traj.loss_mask) == traj.num_generated_tokens > 0
    assert "passed" in traj.verifier_output_tail


def test_single_confirmation_is_not_enough_to_finish(add_two, smol_tokenizer):
    replies = [terminus(done=True), terminus(("echo again\n", 0.2)), terminus(done=True)]
    cfg = AgentConfig(limits=EpisodeLimits(max_turns=3, max_new_tokens_per_turn=256))
    traj, _ = run(episode(add_two, replies, smol_tokenizer, cfg))
    assert traj.end_reason == "max_turns"
    assert traj.outcome == "failed" and traj.failure_class == "none"


def test_shell_state_persists_across_turns(add_two, smol_tokenizer):
    replies = [
        terminus(("cd /tmp && export SWERL_X=41\n", 0.2)),
        terminus(("echo $((SWERL_X + 1)) $(pwd)\n", 0.2)),
        terminus(done=True),
        terminus(done=True),
    ]
    traj, _ = run(episode(add_two, replies, smol_tokenizer))
    assert "42 /tmp" in traj.messages[4]["content"]


def test_malformed_json_ends_with_parse_failures_and_reward_zero(add_two, smol_tokenizer):
    replies = ["I think we should run ls", '{"analysis": "x", "plan": }', "```json\n{\"analysis\": 1}\n```"]
    cfg = AgentConfig(protocol="terminus-json-fast", limits=EpisodeLimits(max_consecutive_parse_failures=3))
    traj, policy = run(episode(add_two, replies, smol_tokenizer, cfg))
    assert (traj.end_reason, traj.outcome, traj.failure_class, traj.reward) == ("parse_failures", "parse_failures", "zero", 0.0)
    assert traj.num_parse_failures == 3 and traj.num_turns == 3
    assert traj.messages[2]["content"].startswith("Previous response had parsing errors:\nERROR: No valid JSON")
    assert "Invalid JSON" in traj.messages[4]["content"]
    assert traj.verifier_output_tail  # verification ran anyway
    assert not traj.exclude_from_baseline and sum(traj.loss_mask) > 0


def test_fast_variant_reports_a_hanging_command_as_still_running(add_two, smol_tokenizer):
    cfg = AgentConfig(protocol="terminus-json-fast",
                      limits=EpisodeLimits(command_timeout_s=1.5, max_new_tokens_per_turn=512))
    replies = [
        terminus(("sleep 600\n", 300.0)),  # duration capped at the per-command timeout
        terminus(("C-c", 0.5), ("echo back\n", 0.5)),
        terminus(done=True),
        terminus(done=True),
    ]
    traj, _ = run(episode(add_two, replies, smol_tokenizer, cfg))
    assert "still running after 1.5 s" in traj.messages[2]["content"]
    assert "back" in traj.messages[4]["content"] and "still running" not in traj.messages[4]["content"]
    assert traj.end_reason == "task_complete" and traj.timings_s["agent_s"] < 60


def test_megabyte_output_is_cut_to_the_budget(add_two, smol_tokenizer):
    cfg = AgentConfig(protocol="terminus-json-fast", output_budget_bytes=2000)  # the shell variant's budget
    replies = [terminus(("head -c 1000000 /dev/zero | tr '\\0' 'a'; echo; echo END\n", 5.0)),
               terminus(done=True), terminus(done=True)]
    traj, _ = run(episode(add_two, replies, smol_tokenizer, cfg))
    observation = traj.messages[2]["content"]
    assert "interior bytes omitted" in observation and "\nEND\n" in observation
    assert len(observation.encode()) < 2300


def test_context_overflow_is_verified_as_it_stands_and_mask_is_only_an_explicit_choice(add_two, smol_tokenizer):
    policy_probe = ScriptedPolicy(["x"], smol_tokenizer)
    from swerl.agent.episode import first_prompt

    prompt_len = len(first_prompt(add_two, policy_probe, AgentConfig())[3])
    limits = EpisodeLimits(context_window_tokens=prompt_len + 400, max_new_tokens_per_turn=200)
    replies = [terminus((write_file_keys("/app/solution.py", ADD_TWO), 0.3), ("seq 1 2000\n", 1.0)), terminus(done=True)]
    scored, _ = run(episode(add_two, replies, smol_tokenizer, AgentConfig(limits=limits)))
    assert (scored.end_reason, scored.outcome, scored.reward, scored.failure_class) == ("context_overflow", "passed", 1.0, "none")
    assert not scored.exclude_from_baseline and sum(scored.loss_mask) == scored.num_generated_tokens > 0
    assert scored.context_tokens <= prompt_len + 400

    masked, _ = run(episode(add_two, replies, smol_tokenizer, AgentConfig(limits=limits, on_context_full="mask")))
    assert (masked.end_reason, masked.outcome, masked.failure_class) == ("context_overflow", "context_overflow", "mask")
    assert masked.exclude_from_baseline and masked.reward == 0.0 and masked.blame is None
    assert sum(masked.loss_mask) == 0 and masked.num_generated_tokens == 0 and masked.num_policy_tokens > 0


def test_agent_timeout_ends_the_episode_with_reward_zero(add_two, smol_tokenizer):
    cfg = AgentConfig(limits=EpisodeLimits(agent_timeout_s=2.0, command_timeout_s=30.0, max_new_tokens_per_turn=512))
    replies = [terminus((write_file_keys("/app/solution.py", ADD_TWO), 0.3), ("sleep 100\n", 20.0))]
    traj, _ = run(episode(add_two, replies, smol_tokenizer, cfg))
    assert (traj.end_reason, traj.outcome, traj.failure_class, traj.reward) == ("agent_timeout", "agent_timeout", "zero", 0.0)
    assert traj.timings_s["agent_s"] < 10
    assert "passed" in traj.verifier_output_tail  # verified anyway; strict mode still gives 0


def test_agent_timeout_passthrough_uses_the_verifier_reward(add_two, smol_tokenizer):
    cfg = AgentConfig(on_agent_timeout="passthrough",
                      limits=EpisodeLimits(agent_timeout_s=2.0, command_timeout_s=30.0, max_new_tokens_per_turn=512))
    replies = [terminus((write_file_keys("/app/solution.py", ADD_TWO), 0.3), ("sleep 100\n", 20.0))]
    traj, _ = run(episode(add_two, replies, smol_tokenizer, cfg))
    assert (traj.end_reason, traj.outcome, traj.reward) == ("agent_timeout", "passed", 1.0)


def test_tool_call_protocol_end_to_end(add_two, smol_tokenizer):
    def call(command: str) -> str:
        return "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "\n</tool_call>"

    replies = [
        call("cd /app && export GREETING=hi"),
        call(f"printf '{ADD_TWO.encode('unicode_escape').decode()}' > solution.py; echo $GREETING $(pwd); false"),
        "Done: /app/solution.py defines add_two.",
    ]
    traj, _ = run(episode(add_two, replies, smol_tokenizer, AgentConfig(protocol="tool-call")))
    assert (traj.end_reason, traj.outcome, traj.reward) == ("task_complete", "passed", 1.0)
    tool_messages = [m for m in traj.messages if m["role"] == "tool"]
    assert "hi /app" in tool_messages[1]["content"] and "[exit code: 1]" in tool_messages[1]["content"]
    assert "<tools>" in traj.messages[0]["content"]  # SmolLM2's template has no tools: Hermes block inlined


def test_an_agent_that_ends_its_shell_completes_and_is_verified(add_two, smol_tokenizer):
    """`exit` under tool-call and `exec` under terminus-json-fast end the shell: the episode is
    completed and its work product scored, never masked."""
    code = ADD_TWO.encode("unicode_escape").decode()
    exit_call = '<tool_call>' + json.dumps({"name": "bash", "arguments": {
        "command": f"printf '{code}' > /app/solution.py; exit 3"}}) + '</tool_call>'
    by_exit, _ = run(episode(add_two, [exit_call], smol_tokenizer, AgentConfig(protocol="tool-call")))
    by_exec, _ = run(episode(add_two, [terminus((write_file_keys("/app/solution.py", ADD_TWO), 0.3), ("exec true\n", 0.3))],
                             smol_tokenizer, AgentConfig(protocol="terminus-json-fast")))
    for traj in (by_exit, by_exec):
        assert (traj.end_reason, traj.outcome, traj.reward, traj.failure_class) == ("completed", "passed", 1.0, "none")
        assert "the shell ended" in traj.detail and not traj.exclude_from_baseline and sum(traj.loss_mask) > 0


def test_tool_call_command_timeout_interrupts_it(add_two, smol_tokenizer):
    cfg = AgentConfig(protocol="tool-call", limits=EpisodeLimits(command_timeout_s=1.0, max_new_tokens_per_turn=256))
    replies = ['<tool_call>{"name": "bash", "arguments": {"command": "sleep 100"}}</tool_call>',
               '<tool_call>{"name": "bash", "arguments": {"command": "echo alive"}}</tool_call>', "done"]
    traj, _ = run(episode(add_two, replies, smol_tokenizer, cfg))
    tool_messages = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert "timed out after 1 s" in tool_messages[0]
    assert "alive" in tool_messages[1] and "[exit code: 0]" in tool_messages[1]


def test_single_turn_writes_the_first_python_block(add_two, smol_tokenizer):
    reply = f"Here it is:\n```python\n{ADD_TWO}```\n```python\nraise SystemExit\n```"
    traj, _ = run(episode(add_two, [reply], smol_tokenizer, AgentConfig(protocol="single-turn")))
    assert (traj.end_reason, traj.outcome, traj.reward, traj.num_turns) == ("completed", "passed", 1.0, 1)
    assert traj.loss_mask == [1] * len(traj.response_ids)


def test_single_turn_without_code_fails_verification(add_two, smol_tokenizer):
    traj, _ = run(episode(add_two, ["I cannot do that."], smol_tokenizer, AgentConfig(protocol="single-turn")))
    assert (traj.outcome, traj.reward, traj.failure_class, traj.num_parse_failures) == ("failed", 0.0, "none", 1)


def test_starter_code_prefill_lets_a_body_only_reply_pass(humaneval_task, smol_tokenizer):
    """HumanEval/0 needs ``from typing import List``: the body alone passes only when the
    prefill supplies the imports, signature and docstring."""
    task, solution = humaneval_task
    body = solution.split('    """\n')[-1]  # canonical solution: the lines after the docstring
    reply = body + "```\nHope this helps.\n```python\nraise SystemExit\n```"
    cfg = AgentConfig(protocol="single-turn", single_turn_prefill="starter_code")
    traj, policy = run(episode(task, [reply], smol_tokenizer, cfg))
    assert (traj.end_reason, traj.outcome, traj.reward, traj.num_turns) == ("completed", "passed", 1.0, 1)
    answer = traj.messages[-1]["content"]
    assert answer.startswith("```python\nfrom typing import List\n") and answer.endswith(reply)
    # The prefill is prompt (never trained on); only the reply's ids are generated.
    assert policy.prompts == [traj.prompt_ids]
    assert traj.response_ids == [*smol_tokenizer.encode(reply, add_special_tokens=False), policy.end_token_id]
    assert traj.loss_mask == [1] * len(traj.response_ids)

    plain, _ = run(episode(task, [reply], smol_tokenizer, AgentConfig(protocol="single-turn")))
    assert (plain.outcome, plain.reward) == ("failed", 0.0)


def test_prefill_ids_follow_the_assistant_header_verbatim(add_two, smol_tokenizer):
    """prompt_ids = template(messages, generation prompt) + ids of the prefill tokenized alone;
    the generated ids (non-canonical: one id per character) follow verbatim."""
    from swerl.agent.episode import first_prompt
    from swerl.agent.protocols.single_turn import prefill_text
    from swerl.agent.tokens import ChatFormat

    cfg = AgentConfig(protocol="single-turn", single_turn_prefill="fence")
    end = smol_tokenizer.convert_tokens_to_ids("<|im_end|>")
    text = "def add_two(x):\n    return x + 2\n```\n"
    reply = [i for ch in text for i in smol_tokenizer.encode(ch, add_special_tokens=False)] + [end]
    traj, policy = run(episode(add_two, [reply], smol_tokenizer, cfg))
    assert (traj.outcome, traj.reward) == ("passed", 1.0)
    chat = ChatFormat(smol_tokenizer, {"enable_thinking": False})
    _, _, messages, _ = first_prompt(add_two, policy, cfg)
    header = chat.prompt_ids(messages)
    prefill_ids = smol_tokenizer.encode(prefill_text(add_two.instruction, "fence"), add_special_tokens=False)
    assert traj.prompt_ids == header + prefill_ids == policy.prompts[0]
    assert traj.response_ids == reply and traj.loss_mask == [1] * len(reply)
    assert smol_tokenizer.decode(traj.prompt_ids).endswith("<|im_start|>assistant\n```python\n")


def test_recorded_ids_are_exactly_what_the_policy_saw(add_two, smol_tokenizer):
    """Token for token, with replies whose ids are not the tokenizer's canonical encoding and
    observations (odd whitespace, combining marks, emoji) that do not survive decode/encode."""
    odd = "caf\u0065\u0301 \u00a0\t  \U0001F600  \u200b end   "
    replies_text = [
        terminus((f"printf '%s\\n' '{odd}' > odd.txt; cat odd.txt\n", 0.3)),
        terminus(("printf 'a  \\t b\\r\\n\\n\\n  c'\n", 0.3)),
        terminus(done=True),
        terminus(done=True),
    ]
    end = smol_tokenizer.convert_tokens_to_ids("<|im_end|>")
    # One id per character: decodes to the same text, but re-encoding would merge them.
    replies = [[i for ch in r for i in smol_tokenizer.encode(ch, add_special_tokens=False)] + [end]
               for r in replies_text[:2]] + replies_text[2:]
    # The shell variant passes output bytes through unchanged (a tmux pane turns the tab into spaces).
    traj, policy = run(episode(add_two, replies, smol_tokenizer, AgentConfig(protocol="terminus-json-fast")))
    assert traj.end_reason == "task_complete" and odd.strip() in traj.messages[2]["content"]
    last = policy.prompts[-1]
    seen = len(last) - len(traj.prompt_ids)
    assert last == traj.prompt_ids + traj.response_ids[:seen]
    for earlier in policy.prompts:
        assert earlier == last[: len(earlier)]
    assert traj.response_ids[seen:] == [*smol_tokenizer.encode(replies_text[3], add_special_tokens=False), end]
    assert smol_tokenizer.encode(smol_tokenizer.decode(last), add_special_tokens=False) != last
    # Generated ids carry mask 1; everything in between (observations) mask 0.
    generated = sum(len(r) for r in replies[:2]) + 2 * (len(smol_tokenizer.encode(replies_text[3], add_special_tokens=False)) + 1)
    assert sum(traj.loss_mask) == generated


def test_what_an_attempt_provokes_keeps_its_tokens_and_is_verified(add_two, smol_tokenizer):
    """A reply nested past the JSON parser's depth, a lone surrogate in a command, and a directory
    tree deeper than Python's recursion limit (the tamper scan walks it) once crashed the episode:
    it then ended as an error with no trainable token, so the penalty never reached what caused it.
    Each is now an ordinary episode: its wrong solution is verified (failed, reward 0, class none)
    and every generated token keeps its loss mask."""
    def call(command: str) -> str:
        return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"

    wrong = "printf 'def add_two(x):\\n    return x\\n' > /app/solution.py"
    attacks = {
        "nested": [call(wrong), "<tool_call>" + "[" * 1000 + "]" * 1000 + "</tool_call>"],
        "surrogate": [call(wrong), '<tool_call>{"name": "bash", "arguments": {"command": "echo \\ud800"}}</tool_call>'],
        "deep-tree": [call(wrong + " && cd /root && mkdir -p $(printf 'd/%.0s' $(seq 1200))")],
    }
    for name, replies in attacks.items():
        cfg = AgentConfig(protocol="tool-call", limits=EpisodeLimits(max_turns=3, max_new_tokens_per_turn=4096,
                                                                     context_window_tokens=32768))
        traj, _ = run(episode(add_two, replies, smol_tokenizer, cfg))
        assert (traj.outcome, traj.reward, traj.failure_class) == ("failed", 0.0, "none"), (name, traj.detail)
        generated = sum(len(s.response_ids) for s in traj.segments) if traj.segments else len(traj.response_ids)
        assert sum(traj.loss_mask) > 0 and generated > 0, name


def test_a_timeout_other_than_the_deadline_keeps_the_tokens_and_is_verified(add_two, smol_tokenizer):
    """A TimeoutError raised inside the agent phase by some inner wait (not the episode's deadline)
    once left the episode as a tokenless error: now it ends like any other failure the attempt may
    have provoked, its wrong solution verified (reward 0, class none) and its tokens trained."""
    from swerl.sandbox.runtime.shell import Shell

    def call(command: str) -> str:
        return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"

    real_run, calls = Shell.run, []

    async def run_then_time_out(self, command, timeout_s=30.0):  # noqa: ANN001, ANN202
        calls.append(command)
        if len(calls) > 1:
            raise TimeoutError("an inner wait gave up")
        return await real_run(self, command, timeout_s)

    wrong = "printf 'def add_two(x):\\n    return x\\n' > /app/solution.py"
    cfg = AgentConfig(protocol="tool-call", limits=EpisodeLimits(max_turns=3, max_new_tokens_per_turn=4096,
                                                                 context_window_tokens=32768))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Shell, "run", run_then_time_out)
        traj, _ = run(episode(add_two, [call(wrong), call("echo next")], smol_tokenizer, cfg))
    assert len(calls) == 2, calls
    assert (traj.outcome, traj.reward, traj.failure_class) == ("failed", 0.0, "none"), traj.detail
    assert "TimeoutError" in traj.detail
    assert sum(traj.loss_mask) > 0
