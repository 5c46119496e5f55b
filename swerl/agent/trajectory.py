"""The record of one episode that training consumes: token-in, token-out
(``docs/tasks.md``), never rebuilt by re-tokenizing text.

An episode is one token sequence unless terminus-2 summarized its context: then each
conversation the policy was sampled in (the agent's before the handoff, the summary and
answers, the questions) is a :class:`Segment` of its own, and the top-level ids are the
last agent conversation. Each segment is token-in/token-out on its own; all of them share
the episode's reward (``docs/terminus2.md``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from swerl.sandbox.types import Blame, FailureClass
"""``none``: reward counts; ``mask``: infra failure, excluded from the baseline and the loss;
``zero``: agent failure, reward 0, kept in the baseline (docs/tasks.md, Failure classes)."""


SegmentKind = Literal["agent", "summary", "questions"]
"""``agent``: an agent conversation cut off by a handoff; ``summary``: the summary request
and reply, then the answers request and reply (one conversation); ``questions``: the next
agent's questions (a conversation of its own)."""


class Segment(BaseModel):
    """One earlier token sequence of an episode (same fields and alignment as the trajectory's).

    Attributes:
        kind: which conversation it is (see ``SegmentKind``).
        prompt_ids: (P,) ids before its first generated id.
        response_ids: (T,) generated and observation ids, in order.
        loss_mask: (T,) 1 on generated ids, 0 on the others.
        rollout_logprobs: (T,) sampling log-probs (0.0 off the generated ids), or None.
        rollout_support: (T,) kept sets (see ``Trajectory``), or None.
        messages: its chat messages (for humans).
    """

    kind: SegmentKind
    prompt_ids: list[int]
    response_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    rollout_logprobs: list[float] | None = None
    rollout_support: list[list[int]] | None = None
    messages: list[dict] = Field(default_factory=list)

    @model_validator(mode="after")
    def _aligned(self) -> "Segment":
        _check_aligned(self.response_ids, self.loss_mask, self.rollout_logprobs, self.rollout_support)
        return self


class Trajectory(BaseModel):
    """One sampled episode of one task.

    Attributes:
        task_name: task folder name.
        group_id: id shared by the n samples of one prompt (the RLOO group / ``uid``).
        prompt_ids: (P,) token ids of the first prompt (chat template applied).
        response_ids: (T,) every id after the prompt: generated ids and observation ids, in order.
        loss_mask: (T,) 1 on model-generated ids, 0 on observation ids.
        rollout_logprobs: (T,) sampling log-prob of each generated id (0.0 on observation ids),
            or None when the backend returned none (TIS weight 1).
        rollout_support: (T,) the kept set each generated id was sampled from under top-k /
            top-p (its token ids; ``swerl.rl.support``: at most top_k ids each, ``[]`` on
            observation ids), or None when sampling did not truncate (the whole vocabulary) or
            the backend returned none. ``algorithm.sampling_support=replay`` normalises over it.
        reward: verifier reward in [0, 1]; 0 for failures.
        outcome: typed outcome (verifier outcome or episode end reason).
        failure_class: how training treats it (see ``FailureClass``).
        exclude_from_baseline: True for ``mask`` failures (RLOO-n leaves them out).
        end_reason: why the episode stopped (task_complete, max_turns, context_overflow, ...).
        num_turns: assistant turns taken.
        num_generated_tokens: sum of ``loss_mask``.
        hit_length_limit: a turn ended on ``max_new_tokens``.
        messages: the chat transcript (for humans; never used to rebuild ids).
        verifier_output_tail: last bytes of test.sh output, decoded with replacement.
        weight_version: policy version that sampled the episode (its last turn).
        turn_weight_versions: policy version of each generated turn, in order.
        timings_s: wall-clock seconds per phase (``agent_s``, ``verify_s``, ``container_wait_s``),
            and the episode's containers taken warm or started on demand (``containers_warm``,
            ``containers_cold``; :func:`swerl.agent.collect.container_timings`).
        num_policy_tokens: ids sampled from the policy, counted even when the trajectory is
            masked (``num_generated_tokens`` then is 0).
        num_parse_failures: replies the protocol could not parse.
        context_tokens: P + T, the final context length, tokens.
        detail: one line on why the episode or its verification failed ("" if it did not).
        segments: the earlier token sequences when the context was summarized, in the order
            they were sampled (empty otherwise); the top-level ids are the last one.
        num_summarizations: context handoffs (terminus-2 summarization) in the episode.
        blame: set when a control run decided the class of an episode without a trustworthy
            reward (``attempt``: ``zero``; ``infrastructure``: ``mask``, the task flagged); None
            when no control ran.
        seed: the episode's sampling seed (turn t samples with ``seed + t``); None = the
            backend's own RNG. Two episodes with equal seeds and weights sample the same turns.
        tamper: why the episode looks like an attempt on the verifier, one ``family: what``
            line each (its commands and the container it left; docs/sandbox.md, Tamper signal);
            empty when nothing touched it.
    """

    task_name: str
    group_id: str
    sample_index: int = 0
    prompt_ids: list[int]
    response_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    rollout_logprobs: list[float] | None = None
    rollout_support: list[list[int]] | None = None
    reward: float = 0.0
    outcome: str = "unknown"
    failure_class: FailureClass = "none"
    exclude_from_baseline: bool = False
    end_reason: str = "unknown"
    num_turns: int = 0
    num_generated_tokens: int = 0
    hit_length_limit: bool = False
    messages: list[dict] = Field(default_factory=list)
    verifier_output_tail: str = ""
    weight_version: int = 0
    turn_weight_versions: list[int] = Field(default_factory=list)
    timings_s: dict[str, float] = Field(default_factory=dict)
    num_policy_tokens: int = 0
    num_parse_failures: int = 0
    context_tokens: int = 0
    detail: str = ""
    segments: list[Segment] = Field(default_factory=list)
    num_summarizations: int = 0
    blame: Blame | None = None
    seed: int | None = None
    tamper: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _aligned(self) -> "Trajectory":
        _check_aligned(self.response_ids, self.loss_mask, self.rollout_logprobs, self.rollout_support)
        return self

    def token_sequences(self) -> list[Segment]:
        """Every token sequence of the episode in sampling order, the last agent one included."""
        last = Segment(kind="agent", prompt_ids=self.prompt_ids, response_ids=self.response_ids,
                       loss_mask=self.loss_mask, rollout_logprobs=self.rollout_logprobs,
                       rollout_support=self.rollout_support)
        return [*self.segments, last]


def _check_aligned(response_ids: list[int], loss_mask: list[int], rollout_logprobs: list[float] | None,
                   rollout_support: list[list[int]] | None = None) -> None:
    if len(loss_mask) != len(response_ids):
        raise ValueError(f"loss_mask has {len(loss_mask)} ids, response_ids {len(response_ids)}")
    if rollout_logprobs is not None and len(rollout_logprobs) != len(response_ids):
        raise ValueError(f"rollout_logprobs has {len(rollout_logprobs)} values, response_ids {len(response_ids)}")
    if rollout_support is not None and len(rollout_support) != len(response_ids):
        raise ValueError(f"rollout_support has {len(rollout_support)} kept sets, response_ids {len(response_ids)}")
