"""One agent episode in one sandbox: sample, act, observe until an end reason, then verify.

Token-in/token-out: the prompt ids come from the chat
template once; every assistant turn appends exactly the generated ids (loss mask 1) and
every observation appends only the ids of the template's delta for the new messages
(loss mask 0). The policy is always conditioned on ``prompt_ids + response_ids``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING

from swerl.agent.config import AgentConfig, EpisodeLimits
from swerl.agent.outcome import Verdict, judge
from swerl.agent.policy import Policy
from swerl.agent.protocols import AgentProtocol, EndReason, make_protocol
from swerl.agent.summarize import ContextSummarizer
from swerl.agent.tamper import episode_tamper, on_tamper, with_tamper
from swerl.agent.tokens import ChatFormat, TokenRecord
from swerl.agent.trajectory import FailureClass, Segment, Trajectory
from swerl.errors import SandboxError
from swerl.sandbox.control import ControlResult
from swerl.sandbox.runtime.shell import ShellExited

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from swerl.inference.backends.base import Generation, SamplingParams
    from swerl.sandbox.runtime.sandbox import Sandbox
    from swerl.sandbox.types import VerifierResult
    from swerl.tasks.task_folder import Task

logger = logging.getLogger(__name__)


@dataclass
class _EpisodeState:
    """What the loop has built so far; kept when a timeout interrupts it."""

    messages: list[dict]
    record: TokenRecord
    num_turns: int = 0
    num_parse_failures: int = 0
    hit_length_limit: bool = False
    weight_version: int = 0
    detail: str = ""
    timings_s: dict[str, float] = field(default_factory=dict)
    segments: list[Segment] = field(default_factory=list)
    num_summarizations: int = 0


def first_prompt(task: Task, policy: Policy, cfg: AgentConfig) -> tuple[AgentProtocol, ChatFormat, list[dict], list[int]]:
    """The protocol, chat format, first messages and (P,) prompt ids of an episode of ``task``.

    The prompt ids are the template over the messages with the assistant header, followed
    by the ids of the protocol's assistant prefill (tokenized once, on its own), if any:
    everything before the first generated id. Needs no sandbox, so a trajectory can be
    recorded even when the sandbox never starts.
    """
    protocol = make_protocol(cfg, template_has_tools=_template_has_tools(policy.tokenizer))
    chat = ChatFormat(policy.tokenizer, {"enable_thinking": cfg.enable_thinking}, tools=protocol.tools())
    messages = protocol.initial_messages(task.instruction)
    prompt_ids = chat.prompt_ids(messages)
    if protocol.prefill:
        prompt_ids += chat.encode(protocol.prefill)
    return protocol, chat, messages, prompt_ids


@dataclass
class PlayedEpisode:
    """An episode acted and verified, before any control run (:func:`finish_trajectory` makes its
    trajectory). ``verifier`` is the ``VerifierResult``, None when verification failed or did not run;
    ``tamper``: the episode's tamper reasons (:func:`swerl.agent.tamper.episode_tamper`)."""

    state: _EpisodeState
    end_reason: str
    verifier: VerifierResult | None
    verdict: Verdict
    tamper: list[str] = field(default_factory=list)


class SamplerFailed(Exception):
    """The policy's sampler raised: the inference stage failed, which no attempt can provoke (its
    prompts are bounded by the episode's own limits). The episode is masked without a control."""


class _GuardedPolicy:
    """``policy`` whose failures are :class:`SamplerFailed` (told apart from the attempt's doing)."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self.tokenizer = policy.tokenizer

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        try:
            return await self._policy.generate(prompt_ids, sampling)
        except Exception as err:  # noqa: BLE001 - any failure of the inference stage
            raise SamplerFailed(f"{type(err).__name__}: {err}") from err


async def play_episode(
    task: Task, sandbox: Sandbox, policy: Policy, protocol_cfg: AgentConfig, limits: EpisodeLimits | None = None,
    *, seed: int | None = None, on_verify: Callable[[], None] | None = None,
) -> PlayedEpisode:
    """Act in ``sandbox`` until an end reason, then verify what the agent left (see :func:`run_episode`).

    Whatever ends the agent phase (its own choice, a budget, a shell it ended, its container failing),
    the work product is verified as it stands; only a failing sampler skips verification. A verdict
    without a trustworthy reward says ``needs_control``: the caller runs a control after the sandbox
    is released (:func:`swerl.sandbox.control.run_control`). ``on_verify`` is called when the agent
    phase ends and verification starts (for live displays).
    """
    cfg, limits = protocol_cfg, limits or protocol_cfg.limits
    protocol, chat, messages, prompt_ids = first_prompt(task, policy, cfg)
    policy = _GuardedPolicy(policy)
    state = _EpisodeState(messages=messages, record=TokenRecord(prompt_ids=prompt_ids))
    timeout_s = limits.agent_timeout_s or float(task.config.agent.timeout_sec)
    sandbox_outcome: str | None = None

    started = time.monotonic()
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            end_reason = await _agent_loop(protocol, chat, sandbox, policy, cfg, limits, state, seed)
    except ShellExited as err:  # the agent ended its shell (or the container stopped): verified as it stands
        end_reason, state.detail = "completed", f"the shell ended: {err}"
    except SandboxError as err:
        end_reason, sandbox_outcome, state.detail = "sandbox_error", _outcome_name(err), str(err)
        logger.warning("%s: sandbox failed during the episode (its work product is verified as it stands): %s",
                       task.name, err)
    except SamplerFailed as err:
        state.timings_s["agent_s"] = time.monotonic() - started
        state.detail = f"the sampler failed: {err}"
        tamper = episode_tamper(protocol.actions, [])
        return PlayedEpisode(state, "sampler_error", None, Verdict("sampler_error", 0.0, FailureClass.mask), tamper)
    except Exception as err:  # noqa: BLE001 - whatever the attempt provoked: its tokens stay, its work is verified
        if isinstance(err, TimeoutError) and deadline.expired():
            end_reason, state.detail = "agent_timeout", f"agent exceeded its {timeout_s:g} s budget"
        else:  # any other timeout too: what an inner wait gave up on is no reason to drop the tokens
            end_reason, state.detail = "completed", f"the episode failed: {type(err).__name__}: {str(err)[:500]}"
            logger.warning("%s: %s (verified as it stands)", task.name, state.detail)
    state.timings_s["agent_s"] = time.monotonic() - started

    if on_verify is not None:
        on_verify()
    verifier, verify_outcome, scanned = await _verify(sandbox, state)
    tamper = episode_tamper(protocol.actions, scanned)
    verdict = on_tamper(judge(end_reason, verifier, cfg, verify_outcome or sandbox_outcome), tamper, cfg)
    return PlayedEpisode(state, end_reason, verifier, verdict, tamper)


def finish_trajectory(task: Task, played: PlayedEpisode, control: ControlResult | None = None, *,
                      group_id: str | None = None, sample_index: int = 0) -> Trajectory:
    """The trajectory of ``played``, its class settled by ``control`` when one ran (``zero`` when
    the control read a reward, ``mask`` when it failed too; ``blame`` and its seconds recorded)."""
    verdict, state = played.verdict, played.state
    if control is not None:
        verdict = Verdict(verdict.outcome, 0.0, control.failure_class)
        state.detail = "; ".join(x for x in (state.detail, control.detail) if x)
        state.timings_s["control_s"] = control.seconds
    traj = with_tamper(_trajectory(task, group_id, sample_index, state, played.end_reason, verdict, played.verifier),
                       played.tamper)
    return traj if control is None else traj.model_copy(update={"blame": control.blame})


async def run_episode(
    task: Task,
    sandbox: Sandbox,
    policy: Policy,
    protocol_cfg: AgentConfig,
    limits: EpisodeLimits | None = None,
    *,
    group_id: str | None = None,
    sample_index: int = 0,
    seed: int | None = None,
    on_verify: Callable[[], None] | None = None,
) -> Trajectory:
    """Run one episode of ``task`` in a started ``sandbox`` and verify it (no control run: a
    trajectory without a trustworthy reward stays ``mask``; the collector runs the control).

    Args:
        task: a ``swerl.tasks.Task`` (instruction, ``config.agent.timeout_sec``).
        sandbox: a started sandbox (``open_shell``, ``write_file``, ``verify``).
        policy: what samples the assistant turns.
        protocol_cfg: protocol, sampling and failure-policy settings.
        limits: episode budgets; ``protocol_cfg.limits`` when None. ``agent_timeout_s`` None
            means the task's ``[agent] timeout_sec``.
        group_id, sample_index: identity of the trajectory in its RLOO group.
        seed: episode sampling seed (turn t uses ``seed + t``); None = backend RNG.
        on_verify: called when the agent is done and the verifier starts (for live displays).

    Returns:
        The trajectory, verified unless the sampler failed; never raises for agent or
        sandbox failures (they become end reasons and failure classes).
    """
    played = await play_episode(task, sandbox, policy, protocol_cfg, limits, seed=seed, on_verify=on_verify)
    return finish_trajectory(task, played, group_id=group_id, sample_index=sample_index)


async def _agent_loop(
    protocol: AgentProtocol, chat: ChatFormat, sandbox: Sandbox, policy: Policy, cfg: AgentConfig,
    limits: EpisodeLimits, state: _EpisodeState, seed: int | None,
) -> EndReason:
    """Turns until the protocol, a budget or the context window ends the episode."""
    await protocol.start(sandbox)
    fresh = protocol.messages_after_start()
    if fresh is not None:  # e.g. the real first screen; nothing generated yet, so re-render
        state.messages[:] = fresh
        state.record.prompt_ids = chat.prompt_ids(fresh) + (chat.encode(protocol.prefill) if protocol.prefill else [])
    summarizer = None
    if cfg.on_context_full == "summarize" and protocol.supports_summarization:
        summarizer = ContextSummarizer(protocol, chat, policy, cfg, limits, seed)
    pending: list[dict] | None = None  # the observation not yet in the record
    while True:
        # Budgets checked before each turn: turns, then the context (shown or handed off).
        if state.num_turns >= limits.max_turns:
            return "max_turns"
        if pending is not None and not await _observe(chat, state, summarizer, pending, limits):
            return "context_overflow"
        pending = None
        room = limits.context_window_tokens - state.record.num_tokens
        if room <= 0 and not await _hand_off(state, summarizer, reactive=True):
            return "context_overflow"
        room = limits.context_window_tokens - state.record.num_tokens
        max_new = min(limits.max_new_tokens_per_turn, room)

        # Sample one assistant turn conditioned on exactly the recorded ids.
        record = state.record
        turn_seed = None if seed is None else seed + state.num_turns
        sampling = cfg.sampling(max_new, sorted(chat.stop_token_ids), turn_seed, list(protocol.stop_strings))
        generation = await policy.generate(record.context_ids(), sampling)
        record.add_generation(generation)
        state.weight_version = generation.weight_version
        state.num_turns += 1
        reply = chat.decode_reply(generation.token_ids)
        if state.num_turns == 1:  # the assistant turn started with the prefill (prompt ids)
            reply = protocol.prefill + reply
        state.messages.append({"role": "assistant", "content": reply})
        result = None
        if generation.finish_reason == "length":
            state.hit_length_limit = True
            if max_new < limits.max_new_tokens_per_turn:  # cut by the end of the context window
                if not await _hand_off(state, summarizer, reactive=True):
                    return "context_overflow"
                continue
            result = await protocol.act_truncated(reply, sandbox, max_new)

        # Act in the sandbox; the protocol says what the next user/tool turn is.
        if result is None:
            result = await protocol.act(reply, sandbox)
        state.num_parse_failures += int(result.parse_failed)
        if result.end_reason is not None:
            return result.end_reason
        pending = result.observation


async def _observe(chat: ChatFormat, state: _EpisodeState, summarizer: ContextSummarizer | None,
                   observation: list[dict], limits: EpisodeLimits) -> bool:
    """Show ``observation`` (its template delta appended to the record), unless the context is
    handed off first (proactive summarization) or it does not fit (reactive). False when the
    context is full and no handoff took its place."""
    record = state.record
    if summarizer is not None and summarizer.is_due(record.num_tokens):
        if await _hand_off(state, summarizer, reactive=False):
            return True
        if state.record is not record:  # handed off, but the new prompt leaves no room
            return False
    last_id = record.response_ids[-1] if record.loss_mask and record.loss_mask[-1] == 1 else None
    observation_ids = chat.observation_ids(observation, last_id)
    if record.num_tokens + len(observation_ids) <= limits.context_window_tokens:
        state.messages.extend(observation)
        record.add_observation(observation_ids)
        return True
    if summarizer is None:
        state.messages.extend(observation)  # shown in the transcript, never in the record
        return False
    return await _hand_off(state, summarizer, reactive=True)


async def _hand_off(state: _EpisodeState, summarizer: ContextSummarizer | None, reactive: bool) -> bool:
    """Replace the conversation by the summarizer's handoff: the current one becomes a segment.
    False when there is no summarizer, it failed, or the new prompt leaves no room."""
    if summarizer is None:
        return False
    handoff = await summarizer.hand_off(state.messages, reactive=reactive)
    state.num_summarizations = summarizer.count
    if handoff is None:
        return False
    record = state.record
    state.segments.append(Segment(
        kind="agent", prompt_ids=record.prompt_ids, response_ids=record.response_ids, loss_mask=record.loss_mask,
        rollout_logprobs=list(record.logprobs) if record.has_logprobs else None,
        rollout_support=record.rollout_support(), messages=list(state.messages)))
    state.segments.extend(handoff.segments)
    state.record = TokenRecord(prompt_ids=handoff.prompt_ids)
    state.messages = handoff.messages
    return summarizer.window - len(handoff.prompt_ids) > 0


async def _verify(sandbox: Sandbox, state: _EpisodeState) -> tuple[VerifierResult | None, str | None, list[str]]:
    """Run the task's tests: (the verdict, None, the container's tamper reasons); a sandbox failure
    here yields (None, its outcome, the reasons of the scan that ran before it failed)."""
    started = time.monotonic()
    try:
        verifier = await sandbox.verify()
        return verifier, None, list(verifier.tamper)
    except SandboxError as err:
        state.detail = f"verification failed: {err}"
        return None, _outcome_name(err), list(err.tamper)
    except Exception as err:  # noqa: BLE001 - e.g. the container's files provoked the scan: a control settles it
        state.detail = f"verification failed: {type(err).__name__}: {str(err)[:500]}"
        logger.warning("%s", state.detail)
        return None, "trial_error", []
    finally:
        state.timings_s["verify_s"] = time.monotonic() - started


def _trajectory(task: Task, group_id: str | None, sample_index: int, state: _EpisodeState, end_reason: str,
                verdict: Verdict, verifier: VerifierResult | None) -> Trajectory:
    """Assemble the trajectory; a ``mask`` verdict zeroes the loss masks (no trainable tokens)."""
    record = state.record
    masked = verdict.failure_class == "mask"
    loss_mask = [0] * len(record.loss_mask) if masked else list(record.loss_mask)
    segments = [seg.model_copy(update={"loss_mask": [0] * len(seg.loss_mask)}) if masked else seg
                for seg in state.segments]
    earlier_generated = sum(sum(seg.loss_mask) for seg in state.segments)
    return Trajectory(
        task_name=task.name,
        group_id=group_id or task.name,
        sample_index=sample_index,
        prompt_ids=record.prompt_ids,
        response_ids=record.response_ids,
        loss_mask=loss_mask,
        rollout_logprobs=list(record.logprobs) if record.has_logprobs else None,
        rollout_support=record.rollout_support(),
        reward=verdict.reward,
        outcome=verdict.outcome,
        failure_class=verdict.failure_class,
        exclude_from_baseline=masked,
        end_reason=end_reason,
        num_turns=state.num_turns,
        num_generated_tokens=sum(loss_mask) + sum(sum(seg.loss_mask) for seg in segments),
        num_policy_tokens=sum(record.loss_mask) + earlier_generated,
        num_parse_failures=state.num_parse_failures,
        context_tokens=record.num_tokens,
        hit_length_limit=state.hit_length_limit,
        messages=state.messages,
        verifier_output_tail=getattr(verifier, "output_tail", "") if verifier is not None else "",
        weight_version=state.weight_version,
        turn_weight_versions=list(record.turn_weight_versions),
        timings_s=state.timings_s,
        detail=state.detail or (getattr(verifier, "detail", "") if verifier is not None else ""),
        segments=segments,
        num_summarizations=state.num_summarizations,
    )


def masked_trajectory(task: Task, policy: Policy, cfg: AgentConfig, *, group_id: str, sample_index: int,
                      outcome: str, detail: str, control: ControlResult | None = None) -> Trajectory:
    """A trajectory for an episode that never ran or crashed: the first prompt only, reward 0,
    class ``mask``, unless a ``control`` run (after a crash) put the blame on the attempt (``zero``)."""
    _, _, messages, prompt_ids = first_prompt(task, policy, cfg)
    failure_class = FailureClass.mask if control is None else control.failure_class
    timings = {} if control is None else {"control_s": control.seconds}
    detail = detail if control is None else f"{detail}; {control.detail}"
    return Trajectory(
        task_name=task.name, group_id=group_id, sample_index=sample_index, prompt_ids=prompt_ids,
        outcome=outcome, failure_class=failure_class, exclude_from_baseline=failure_class == FailureClass.mask,
        end_reason="sandbox_error", messages=messages, context_tokens=len(prompt_ids), detail=detail,
        timings_s=timings, blame=None if control is None else control.blame,
    )


def _template_has_tools(tokenizer: PreTrainedTokenizerBase) -> bool:
    return "tools" in (getattr(tokenizer, "chat_template", None) or "")


def _outcome_name(err: BaseException) -> str:
    """The outcome a sandbox failure names (``sandbox_error`` when it names none)."""
    outcome = err.outcome if isinstance(err, SandboxError) else None
    return outcome.value if outcome is not None else "sandbox_error"
