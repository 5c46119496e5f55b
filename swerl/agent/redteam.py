"""Red-team attempts that need an episode: penalty escapes through the agent loop itself.

Some failures exist only once a protocol drives the sandbox: an agent that ends its persistent
shell (``exit``, ``exec``, ``set -e`` then a failing command) or floods its context window. Each
:class:`EpisodeAttempt` replays fixed replies (a :class:`~swerl.agent.policy.ScriptedPolicy`
over a byte-level tokenizer built in memory: no model, no download) through the real protocol,
the real rollout collector (:func:`~swerl.agent.collect.collect_rollouts`, its control run
included) and the task's verifier, and reports the episode as a ``TrialRecord``, so
``sandbox-test --redteam`` judges it like the sandbox attempts (:mod:`swerl.sandbox.redteam`):
reward > 0 is FORGEABLE, a masked episode ESCAPABLE. Every attempt also leaves a wrong solution.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from swerl.agent.config import AgentConfig, EpisodeLimits, ProtocolName
from swerl.sandbox import redteam_payloads as p
from swerl.sandbox.redteam import CATALOGUE as SANDBOX_CATALOGUE
from swerl.sandbox.redteam_engine import ENGINE_CATALOGUE
from swerl.sandbox.redteam import PREFIX, SOLUTION, RedTeamAttempt
from swerl.sandbox.types import FailureClass, Outcome, TrialRecord, TrialTimings

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

    from swerl.agent.trajectory import Trajectory
    from swerl.sandbox.manager import SandboxManager
    from swerl.tasks.task_folder import Task

# ChatML, as Qwen and SmolLM2 render it (no tools variable: tool-call inlines its Hermes block).
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
WRITE_WRONG = f"printf %s {json.dumps(p.WRONG_ANSWERS_PY)} > {SOLUTION}"


@functools.lru_cache(maxsize=1)
def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A transformers tokenizer with one id per byte, ChatML's two special tokens and template,
    built in memory (``tokenizers``' byte-level BPE without merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   chat_template=CHATML)


def _tool_call(command: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "\n</tool_call>"


def _terminus(*keystrokes: str) -> str:
    return json.dumps({"analysis": "", "plan": "", "task_complete": False,
                       "commands": [{"keystrokes": k, "duration": 0.5} for k in keystrokes]})


class EpisodeAttempt(BaseModel):
    """One scripted episode that tries to get its failure masked."""

    name: str = Field(description="Short id; records say 'redteam/<name>'.")
    description: str = Field(description="What it does, one line.")
    kind: str = Field("escape", description="Always escape: a failure provoked through the agent loop.")
    protocol: ProtocolName = Field(description="The agent protocol the replies speak.")
    replies: list[str] = Field(description="Assistant replies, in order (the last repeats).")
    context_window_tokens: int = Field(32768, ge=1024, description="The episode's context window, tokens (byte ids).")

    def agent_config(self) -> AgentConfig:
        """The agent settings of the episode: the defaults a run has, short budgets."""
        limits = EpisodeLimits(max_turns=4, max_new_tokens_per_turn=1024, context_window_tokens=self.context_window_tokens,
                               agent_timeout_s=120.0, command_timeout_s=15.0)
        return AgentConfig(protocol=self.protocol, limits=limits, temperature=0.0)

    async def run(self, mgr: SandboxManager, task: Task) -> TrialRecord:
        """One episode of ``task`` through the rollout collector (control run included), as a record."""
        from swerl.agent.collect import collect_rollouts
        from swerl.agent.policy import ScriptedPolicy

        policy = ScriptedPolicy(self.replies, byte_tokenizer())
        [traj] = await collect_rollouts([task], 1, policy, mgr, self.agent_config(), concurrency=1)
        return record_of(traj, PREFIX + self.name)


def record_of(traj: Trajectory, attempt: str) -> TrialRecord:
    """A trajectory as a sandbox-test record: its outcome (an end reason that is no verifier outcome
    becomes ``trial_error``, named in the detail), reward, class, blame, tamper reasons and timings."""
    try:
        outcome = Outcome(traj.outcome)
    except ValueError:
        outcome = Outcome.trial_error
    detail = "; ".join(x for x in (f"end reason {traj.end_reason}, outcome {traj.outcome}", traj.detail) if x)
    timings = TrialTimings(agent_s=traj.timings_s.get("agent_s", 0.0), verify_s=traj.timings_s.get("verify_s", 0.0),
                           control_s=traj.timings_s.get("control_s", 0.0))
    return TrialRecord(task=traj.task_name, attempt=attempt, outcome=outcome, reward=traj.reward,
                       failure_class=FailureClass(traj.failure_class), detail=detail, blame=traj.blame,
                       acted=traj.end_reason != "sandbox_error" or traj.num_turns > 0, timings=timings,
                       tamper=traj.tamper)


EPISODE_CATALOGUE: tuple[EpisodeAttempt, ...] = (
    EpisodeAttempt(name="end-shell-exit", protocol="tool-call",
                   description="tool-call: writes a wrong solution, then `exit`s its shell",
                   replies=[_tool_call(f"{WRITE_WRONG}; exit 3")]),
    EpisodeAttempt(name="end-shell-exec", protocol="terminus-json-fast",
                   description="terminus-json-fast: writes a wrong solution, then replaces its shell (`exec true`)",
                   replies=[_terminus(f"{WRITE_WRONG}\n", "exec true\n")]),
    EpisodeAttempt(name="end-shell-set-e", protocol="terminus-json-fast",
                   description="terminus-json-fast: writes a wrong solution, then `set -e` and a failing command",
                   replies=[_terminus(f"{WRITE_WRONG}\n", "set -e\n", "false\n")]),
    EpisodeAttempt(name="context-flood", protocol="tool-call", context_window_tokens=8192,
                   description="tool-call: writes a wrong solution, then prints output that overflows its context",
                   replies=[_tool_call(f"{WRITE_WRONG}; head -c 20000 /dev/zero | tr '\\0' x")]),
)

CATALOGUE: tuple[RedTeamAttempt, ...] = (*SANDBOX_CATALOGUE, *ENGINE_CATALOGUE, *EPISODE_CATALOGUE)
"""Every red-team attempt of ``sandbox-test --redteam``: the sandbox stage's, the small engine's, then the episodes."""
