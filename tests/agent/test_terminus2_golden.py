"""terminus-2's golden "hello-world, invalid JSON first" episode, replayed on the real engine.

Harbor's golden trace of this episode (``tests/golden/terminus_2/hello-world-invalid-json
.traces.json`` in harbor-framework/harbor) is not copied here: the four replies and the
eight expected messages are rebuilt below from terminus-2's rules. The replies are
``<think>REASONING</think>\\nCONTENT`` (how Harbor exports a reply whose reasoning came
separately), so the protocol runs with ``reasoning_split`` on: the parser reads CONTENT,
as terminus-2 did when the fake server returned the reasoning in its own field.

Normalized before comparing (the same rules as Harbor's ``normalize_traces``):
- container id: ``root@<12 hex>:`` -> ``root@CONTAINER_ID:``;
- timing-dependent blank lines: ``New Terminal Output:\\n+`` -> ``New Terminal Output:\\n\\n``
  and any run of 3+ newlines -> 2 (the pane's 40 rows capture as trailing empty lines).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from swerl.agent.config import AgentConfig
from swerl.agent.episode import run_episode
from swerl.agent.policy import ScriptedPolicy
from swerl.agent.protocols.terminus_texts import PROMPT_TEMPLATE
from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.tasks.load import load_task

pytestmark = pytest.mark.docker

INSTRUCTION = 'Create a file called hello.txt with "Hello, world!" as the content.\n'
PRINTF = "printf 'Hello, world!\\\\n' > hello.txt\\n"  # JSON text of the keystrokes
REASONING = [
    "The task is straightforward - I need to create a single file with specific content. "
    "Using printf is more reliable than echo for exact content control.",
    "I made a mistake in my previous response by not including the required 'analysis' and 'plan' fields. "
    "I need to correct this to follow the proper JSON schema.",
    "The file has been created successfully with the correct content. No further actions are needed.",
    "The task was already marked as complete in the previous step. Confirming completion.",
]
CONTENT = [
    "I need to create a file called hello.txt with 'Hello, world!' as the content.\n"
    f'{{\n  "commands": [\n    {{\n      "keystrokes": "{PRINTF}",\n      "duration": 0.1\n    }}\n  ]\n}}\n'
    "This should work!",
    '{\n  "analysis": "I received an error about missing required fields. Let me provide the complete response.",\n'
    '  "plan": "I will create the hello.txt file with the correct content using printf.",\n'
    f'  "commands": [\n    {{\n      "keystrokes": "{PRINTF}",\n      "duration": 0.1\n    }}\n  ],\n'
    '  "task_complete": false\n}',
    '{\n  "analysis": "The file creation command has been executed successfully.",\n'
    '  "plan": "The task is complete.",\n  "commands": [],\n  "task_complete": true\n}',
    '{\n  "analysis": "Task already completed.",\n  "plan": "No further action needed.",\n'
    '  "commands": [],\n  "task_complete": true\n}',
]
REPLIES = [f"<think>{r}</think>\n{c}" for r, c in zip(REASONING, CONTENT)]
PROMPT_LINE = "root@CONTAINER_ID:/app#"


def expected_messages() -> list[dict]:
    """The eight messages of the episode by terminus-2's rules, already normalized."""
    first_screen = f"Current Terminal Screen:\n{PROMPT_LINE}\n\n"  # the pane's first capture
    user = [
        PROMPT_TEMPLATE.format(instruction=INSTRUCTION, terminal_state=first_screen, max_wait_s=60),
        # reply 1 has no analysis/plan and text around its JSON: nothing runs
        "Previous response had parsing errors:\nERROR: Missing required fields: analysis, plan\n"
        "WARNINGS: - Extra text detected before JSON object\n- Extra text detected after JSON object\n\n"
        "Please fix these issues and provide a proper JSON response.",
        # reply 2 runs printf: the diff starts at the old prompt line, which now carries the echo
        f"New Terminal Output:\n\n{PROMPT_LINE} printf 'Hello, world!\\n' > hello.txt\n{PROMPT_LINE}\n\n",
        # reply 3 claims completion with no commands: the diff is the last prompt line
        f"Current terminal state:\nNew Terminal Output:\n\n{PROMPT_LINE}\n\n"
        "Are you sure you want to mark the task as complete? This will trigger your solution to be graded "
        "and you won't be able to make any further corrections. If so, include \"task_complete\": true in "
        "your JSON response again.",
    ]
    messages = []
    for i, reply in enumerate(REPLIES):
        messages += [{"role": "user", "content": normalize(user[i])}, {"role": "assistant", "content": reply}]
    return messages


def normalize(text: str) -> str:
    """Harbor's trace normalization (see the module docstring)."""
    text = re.sub(r"root@[a-f0-9]{12}:", "root@CONTAINER_ID:", text)
    text = re.sub(r"New Terminal Output:\n+", "New Terminal Output:\n\n", text)
    return re.sub(r"\n{3,}", "\n\n", text)


def hello_world_task(root: Path):
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "instruction.md").write_text(INSTRUCTION)
    (root / "task.toml").write_text(
        'version = "1.0"\n[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n'
        "[environment]\ncpus = 1.0\nmemory_mb = 512\nallow_internet = false\n"
    )
    (root / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        "if [ \"$(cat /app/hello.txt)\" = 'Hello, world!' ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
    )
    return load_task(root)


async def replay_golden_episode(task, tokenizer):
    """Run the four golden replies through the terminus-json protocol in a real sandbox;
    returns (trajectory, policy)."""
    policy = ScriptedPolicy(REPLIES, tokenizer)
    cfg = AgentConfig(protocol="terminus-json", reasoning_split=True)
    async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as manager:
        async with manager.sandbox(task) as sandbox:
            return await run_episode(task, sandbox, policy, cfg, group_id="golden", sample_index=0), policy


def test_golden_invalid_json_episode_matches_terminus2(tmp_path, smol_tokenizer):
    traj, policy = asyncio.run(replay_golden_episode(hello_world_task(tmp_path / "hello-world"), smol_tokenizer))
    assert (traj.end_reason, traj.outcome, traj.reward, traj.num_turns) == ("task_complete", "passed", 1.0, 4)
    got = [{"role": m["role"], "content": normalize(m["content"])} for m in traj.messages]
    expected = expected_messages()
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"message {i} differs"
    assert len(got) == len(expected)

    # Token for token: the recorded ids are the chat template over these very messages.
    rendered = smol_tokenizer.apply_chat_template(traj.messages, tokenize=False)
    ids = smol_tokenizer.encode(rendered.removesuffix("\n"), add_special_tokens=False)
    assert traj.prompt_ids + traj.response_ids == ids
    # Token-in/token-out: every turn was conditioned on a prefix of the final record.
    assert len(policy.prompts) == 4
    assert all(ids[: len(prompt)] == prompt for prompt in policy.prompts)
