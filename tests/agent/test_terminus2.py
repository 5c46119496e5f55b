"""terminus-json (Harbor's terminus-2) limit rules and keys in real sandboxes with tmux."""

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
pytestmark = pytest.mark.docker


def terminus(*commands: tuple[str, float], done: bool = False) -> str:
    body = {"analysis": "look", "plan": "act", "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
            "task_complete": done}
    return json.dumps(body)


def run(replies, tokenizer, cfg: AgentConfig):
    async def go():
        task = load_task(FIXTURE_TASKS / "add-two")
        policy = ScriptedPolicy(replies, tokenizer)
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as manager:
            async with manager.sandbox(task) as sandbox:
                return await run_episode(task, sandbox, policy, cfg, group_id="g", sample_index=0)
    return asyncio.run(go())


def test_reply_cut_at_the_token_limit_runs_nothing_and_is_told_so(smol_tokenizer):
    long_reply = json.dumps({"analysis": "padding " * 200, "plan": "p",
                             "commands": [{"keystrokes": "touch /app/ran\n", "duration": 0.1}]})
    replies = [long_reply, terminus(("ls /app/ran\n", 0.3)), terminus(done=True), terminus(done=True)]
    traj = run(replies, smol_tokenizer, AgentConfig(limits=EpisodeLimits(max_new_tokens_per_turn=80)))
    assert traj.hit_length_limit and traj.end_reason == "task_complete"
    assert traj.messages[2]["content"] == (
        "ERROR!! NONE of the actions you just requested were performed because you exceeded 80 tokens. "
        "Your outputs must be less than 80 tokens. Re-issue this request, breaking it into chunks each of "
        "which is less than 80 tokens.\n\nParser warnings from your truncated response:\n- No valid JSON object found"
    )
    assert "No such file or directory" in traj.messages[4]["content"]


def test_parse_failures_have_no_cap_and_keep_the_pending_confirmation(smol_tokenizer):
    replies = [terminus(done=True), *["not json"] * 4, terminus(done=True)]
    traj = run(replies, smol_tokenizer, AgentConfig(limits=EpisodeLimits(max_turns=8, max_new_tokens_per_turn=256)))
    assert (traj.end_reason, traj.num_parse_failures, traj.num_turns) == ("task_complete", 4, 6)


def test_echoed_commands_full_waits_and_tmux_key_names(smol_tokenizer):
    replies = [
        terminus(("sleep 100\n", 0.5), ("C-c", 0.3)),
        terminus(("echo a", 0.1), ("C-u", 0.1), ("echo b\n", 0.1), ("Up", 0.1), ("Enter", 0.1)),
        terminus(("true\n", 3.0)),
        terminus(done=True), terminus(done=True),
    ]
    traj = run(replies, smol_tokenizer, AgentConfig())
    first = traj.messages[2]["content"]
    assert first.startswith("New Terminal Output:\n")
    assert ":/app# sleep 100\n^C\nroot@" in first
    second = traj.messages[4]["content"]
    assert second.startswith("Previous response had warnings:\nWARNINGS: - Command 1 should end with newline")
    assert second.count(":/app# echo b\nb\n") == 2 and "\na\n" not in second  # C-u, Up, Enter are keys
    assert traj.timings_s["agent_s"] > 3.5  # the 3 s of `true` elapsed in full


def test_exiting_the_shell_ends_the_episode(smol_tokenizer):
    traj = run([terminus(("exit\n", 0.5))], smol_tokenizer, AgentConfig())
    assert (traj.end_reason, traj.num_turns, traj.outcome) == ("completed", 1, "failed")


def test_first_screen_shows_the_prompt_of_a_slow_login_shell(tmp_path):
    """The first observation waits for the shell: a login profile that takes 2 s before the
    prompt (a busy host does the same) still gives a first screen holding the prompt."""
    import shutil

    from swerl.sandbox.runtime.tmux import TmuxSession

    shutil.copytree(FIXTURE_TASKS / "add-two", tmp_path / "slow-shell")
    dockerfile = tmp_path / "slow-shell" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo 'sleep 2' > /etc/profile.d/00-slow.sh\n")

    async def go() -> str:
        task = load_task(tmp_path / "slow-shell")
        async with SandboxManager(SandboxConfig(concurrency=1, warm_pool=False)) as manager:
            async with manager.sandbox(task) as sandbox:
                session = TmuxSession(sandbox)
                await session.start()
                return await session.incremental_output()

    screen = asyncio.run(go())
    assert screen.startswith("Current Terminal Screen:\n")
    assert "/app#" in screen, screen
