"""The episode's tamper signal and ``on_tamper``, in real sandboxes: a correct single-turn
solution that also names the verifier's reward file passes and is flagged; ``record`` keeps its
reward, ``zero`` makes it reward 0, class zero, trained on; the plain correct solution is not
flagged. The tool-call commands count too."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from swerl.agent.config import AgentConfig
from swerl.agent.episode import run_episode
from swerl.agent.outcome import Verdict
from swerl.agent.policy import ScriptedPolicy
from swerl.agent.tamper import on_tamper
from swerl.agent.trajectory import FailureClass
from swerl.sandbox import SandboxConfig, SandboxManager
from swerl.tasks.load import load_task

FORGE_LINE = "\nREWARD_FILE = '/logs/verifier/reward.txt'  # a look at the verifier's output\n"


@pytest.fixture
def humaneval_task(tmp_path: Path):
    from swerl.tasks.humaneval import import_humaneval, read_humaneval_problems

    folder = import_humaneval(tmp_path / "he", limit=1)[0]
    problem = read_humaneval_problems()[0]
    return load_task(folder), problem["prompt"] + problem["canonical_solution"]


async def _episodes(task, runs: list[tuple[list[str], AgentConfig]], tokenizer):
    async with SandboxManager(SandboxConfig(concurrency=len(runs), warm_pool=False)) as manager:
        async def one(replies: list[str], cfg: AgentConfig):
            async with manager.sandbox(task) as sandbox:
                return await run_episode(task, sandbox, ScriptedPolicy(replies, tokenizer), cfg, group_id="g")
        return await asyncio.gather(*(one(replies, cfg) for replies, cfg in runs))


@pytest.mark.docker
def test_a_flagged_episode_is_recorded_or_zeroed_and_honest_work_is_not_flagged(humaneval_task, smol_tokenizer):
    task, solution = humaneval_task
    single = AgentConfig(protocol="single-turn")
    forged = f"```python\n{solution}{FORGE_LINE}```"
    tool = "<tool_call>\n" + '{"name": "bash", "arguments": {"command": "ls -la /tests 2>&1; kill -9 1"}}' + "\n</tool_call>"
    honest, recorded, zeroed, commands = asyncio.run(_episodes(task, [
        ([f"```python\n{solution}```"], single),
        ([forged], single),
        ([forged], single.model_copy(update={"on_tamper": "zero"})),
        ([tool, "Done."], AgentConfig(protocol="tool-call")),
    ], smol_tokenizer))
    assert (honest.outcome, honest.reward, honest.tamper) == ("passed", 1.0, [])
    assert (recorded.outcome, recorded.reward, recorded.failure_class) == ("passed", 1.0, "none")
    assert "reward: /app/solution.py names the verifier's reward file" in recorded.tamper
    assert "logs: an action names the verifier's output folder /logs" in recorded.tamper
    assert (zeroed.outcome, zeroed.reward, zeroed.failure_class, zeroed.exclude_from_baseline) == ("tamper", 0.0, "zero", False)
    assert zeroed.tamper == recorded.tamper and zeroed.detail.startswith("zeroed (on_tamper: zero): ")
    assert sum(zeroed.loss_mask) == zeroed.num_generated_tokens > 0  # trained on, with its reward 0
    assert commands.num_turns == 2
    assert {"tests: an action names the hidden tests' folder /tests",
            "signal: an action signals PID 1, every process or the verifier's processes"} <= set(commands.tamper)


def test_zero_unmasks_a_flagged_masked_episode_and_record_changes_nothing():
    masked = Verdict("no_reward_file", 0.0, FailureClass.mask)
    zero, record = AgentConfig(on_tamper="zero"), AgentConfig()
    assert on_tamper(masked, ["logs: added /logs/verifier"], zero) == Verdict("tamper", 0.0, FailureClass.zero)
    assert on_tamper(masked, ["logs: added /logs/verifier"], record) == masked
    assert on_tamper(masked, [], zero) == masked
