"""Settings of an agent episode: protocol, limits, sampling (``docs/terminus2.md`` for terminus-json)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerl.fields import set_fields
from swerl.inference.backends.base import SamplingParams

ProtocolName = Literal["terminus-json", "terminus-json-fast", "tool-call", "single-turn"]
AgentFailurePolicy = Literal["zero", "passthrough"]
ContextFullPolicy = Literal["passthrough", "zero", "mask", "summarize"]
TamperPolicy = Literal["record", "zero"]
SingleTurnPrefill = Literal["none", "fence", "starter_code"]


class EpisodeLimits(BaseModel):
    """Budgets that end an episode (each names its unit)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(50, ge=1, description="Assistant turns before the episode ends with max_turns.")
    max_new_tokens_per_turn: int = Field(4096, ge=1, description="Generation budget of one assistant turn, tokens.")
    context_window_tokens: int = Field(
        32768, ge=16, description="Prompt + response budget, tokens; exceeding it ends the episode (context_overflow)."
    )
    agent_timeout_s: float | None = Field(
        None, gt=0, description="Wall-clock budget of the agent, seconds; None = task.toml [agent] timeout_sec."
    )
    command_timeout_s: float = Field(
        60.0, gt=0, description="Longest wait for one command (terminus duration cap, tool-call bash timeout), seconds."
    )
    max_consecutive_parse_failures: int | None = Field(
        None, ge=1,
        description="Unparsable replies in a row before the episode ends with parse_failures; None = no cap (terminus-2).",
    )


_READ_ONLY_WHEN: dict[str, tuple[Callable[[AgentConfig], bool], str]] = {
    "reasoning_split": (lambda c: c.protocol == "terminus-json", "by protocol 'terminus-json'"),
    "solution_path": (lambda c: c.protocol == "single-turn", "by protocol 'single-turn'"),
    "output_budget_bytes": (lambda c: c.protocol != "single-turn", "by the multi-turn protocols, not 'single-turn'"),
    "proactive_summarization_threshold_tokens": (lambda c: c.on_context_full == "summarize",
                                                 "with on_context_full=summarize"),
}
"""Fields read under one setting only (checked at load): name -> (reads(config), the setting in words)."""


class AgentConfig(BaseModel):
    """How an agent acts in the sandbox and how its failures count.

    Shared by ``swerl eval`` and ``swerl train`` (the trainer passes it to
    :func:`swerl.agent.collect.collect_rollouts`).
    """

    model_config = ConfigDict(extra="forbid")

    protocol: ProtocolName = Field(
        "terminus-json",
        description=(
            "Agent protocol: terminus-json (Harbor's terminus-2: tmux pane, full waits), terminus-json-fast "
            "(swerl's quicker departure: no echo, returns when the prompt is back), tool-call, single-turn."
        ),
    )
    limits: EpisodeLimits = Field(default_factory=EpisodeLimits)
    temperature: float = Field(0.7, ge=0.0, description="Sampling temperature; 0 = greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus mass; 1.0 = off (exact TIS parity).")
    top_k: int = Field(0, ge=0, description="Top-k; 0 = off.")
    seed: int | None = Field(None, description="Base sampling seed; each turn of each sample derives its own.")
    enable_thinking: bool = Field(False, description="Passed to the chat template (Qwen3 thinking).")
    reasoning_split: bool = Field(
        False,
        description=(
            "terminus-json: False = the parser reads the whole reply, a leading <think> block included (vLLM "
            "without a reasoning parser, as in the seed run); True = a leading <think>...</think> is cut off "
            "before parsing (a server that returns reasoning separately). The history keeps it either way."
        ),
    )
    output_budget_bytes: int = Field(
        10000, ge=256, description="Terminal/tool output shown per turn, bytes (head + tail kept, middle elided)."
    )
    solution_path: str = Field("/app/solution.py", description="Where single-turn writes the first Python block.")
    single_turn_prefill: SingleTurnPrefill = Field(
        "none",
        description=(
            "Text the single-turn assistant turn starts with (part of the prompt ids, never trained on): "
            "none; fence = '```python\\n'; starter_code = the fence plus the first ```python block of the "
            "instruction (signature + docstring, as EvalPlus does for chat models), or just the fence when "
            "the instruction has none. The solution is then prefill + completion up to the closing fence."
        ),
    )
    on_agent_timeout: AgentFailurePolicy = Field(
        "zero", description="zero: reward 0, kept in the baseline; passthrough: the verifier's reward counts."
    )
    on_parse_failures: AgentFailurePolicy = Field(
        "zero", description="Same choice for an episode ended by unparsable replies."
    )
    on_context_full: ContextFullPolicy = Field(
        "passthrough",
        description=(
            "An episode that fills the context window: passthrough = its work product is verified as it stands "
            "and the verifier's reward counts; zero = reward 0, kept in the baseline (terminus-2 with "
            "enable_summarize off); mask = no trainable tokens, out of the baseline (a policy can then escape "
            "its penalty by filling its context: choose it knowingly); summarize = terminus-2's "
            "summary/questions/answers handoff to a new conversation (terminus-json only; an overflow it "
            "cannot hand off scores 0)."
        ),
    )
    on_tamper: TamperPolicy = Field(
        "record",
        description=(
            "An episode with tamper reasons (it touched the verifier's output, inputs, tools, import path, pytest "
            "config or processes; docs/sandbox.md, Tamper signal): record = the reasons are kept on the trajectory "
            "(`tamper`) and counted (reward/tamper_suspect_rate), the reward is the verifier's; zero = also reward 0, "
            "class zero, kept in the baseline and trained on (a masked episode is unmasked), outcome `tamper`."
        ),
    )
    proactive_summarization_threshold_tokens: int = Field(
        8000, ge=0,
        description=(
            "on_context_full: summarize: also summarize before a turn when fewer than this many tokens are "
            "free (terminus-2's proactive_summarization_threshold); 0 = only when the context is full."
        ),
    )

    @model_validator(mode="after")
    def _turn_fits_window(self) -> "AgentConfig":
        if self.limits.max_new_tokens_per_turn >= self.limits.context_window_tokens:
            raise ValueError(
                "limits.max_new_tokens_per_turn must be smaller than limits.context_window_tokens; lower it or raise the window"
            )
        if self.on_context_full == "summarize" and self.protocol != "terminus-json":
            raise ValueError(
                f"on_context_full=summarize needs protocol 'terminus-json' (got {self.protocol!r}); "
                "use zero or mask, or switch the protocol"
            )
        if self.single_turn_prefill != "none" and self.protocol != "single-turn":
            raise ValueError(
                f"single_turn_prefill={self.single_turn_prefill!r} only applies to protocol 'single-turn' "
                f"(got {self.protocol!r}); set it to 'none' or switch the protocol"
            )
        for name, (reads, why) in _READ_ONLY_WHEN.items():
            if not reads(self) and set_fields(self, [name]):
                raise ValueError(f"{name} is only read {why}: remove it or switch")
        return self

    def sampling(
        self, max_new_tokens: int, stop_token_ids: list[int], seed: int | None = None, stop: list[str] | None = None
    ) -> SamplingParams:
        """Sampling params of one turn: ``max_new_tokens`` (tokens), end-of-turn ids, a per-turn
        seed, and stop strings (only for protocols whose episode ends with the turn)."""
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=max_new_tokens,
            seed=seed,
            stop_token_ids=sorted(stop_token_ids),
            stop=list(stop or []),
        )
