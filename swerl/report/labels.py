"""What the report's panels call each metric: a plain title with its unit, and the range the
metric can take (a fraction lives in [0, 1]; the y axis shows that range, not the noise).

Stage: after the trainer; plain data, no I/O. Keys are those of docs/metrics.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from swerl import metric_keys


@dataclass(frozen=True)
class Label:
    """How a metric is shown. title: plain words. unit: of the y axis. bounds: (low, high) the
    metric can take (high may be ``inf``: a count or a norm), None where unbounded (the y axis
    then spans the data, never less than a tenth of its magnitude)."""

    title: str
    unit: str
    bounds: tuple[float, float] | None = None


FRACTION = (0.0, 1.0)
NON_NEGATIVE = (0.0, math.inf)
LABELS: dict[str, Label] = {
    metric_keys.REWARD_AVG_RAW_REWARD: Label("mean reward of the batch", "reward", FRACTION),
    metric_keys.REWARD_AVG_PASS_AT_N: Label("prompts with a passing sample", "fraction of prompts", FRACTION),
    metric_keys.RESPONSE_LENGTH_MEAN: Label("mean response length", "tokens", NON_NEGATIVE),
    metric_keys.RESPONSE_LENGTH_MAX: Label("longest response", "tokens", NON_NEGATIVE),
    metric_keys.RESPONSE_LENGTH_CLIP_FRACTION: Label("responses cut at max_new_tokens", "fraction of episodes",
                                                     FRACTION),
    metric_keys.RESPONSE_LENGTH_REWARD_POS_MEAN: Label("mean length, rewarded episodes", "tokens", NON_NEGATIVE),
    metric_keys.RESPONSE_LENGTH_REWARD_ZERO_MEAN: Label("mean length, unrewarded episodes", "tokens", NON_NEGATIVE),
    metric_keys.RESPONSE_LENGTH_MASKED_MEAN: Label("mean length, masked episodes", "tokens", NON_NEGATIVE),
    metric_keys.TIS_IMP_RATIO_MEAN: Label("TIS importance weight, mean", "ratio"),
    metric_keys.TIS_IMP_RATIO_CAPPED_FRACTION: Label("TIS weights at the cap", "fraction of tokens", FRACTION),
    metric_keys.TIS_LOG_RATIO_ABS_MEAN: Label("|log pi_train - log pi_sampler|, mean", "nats per token", NON_NEGATIVE),
    metric_keys.TIS_ROWS_WITHOUT_LOGPROBS: Label("rows without sampler log-probs", "rows", NON_NEGATIVE),
    metric_keys.ASYNC_STALENESS_MEAN: Label("rollout staleness, mean", "steps", NON_NEGATIVE),
    metric_keys.ASYNC_STALENESS_MAX: Label("rollout staleness, max", "steps", NON_NEGATIVE),
    metric_keys.LOSS_POLICY: Label("policy loss", "loss"),
    "grad_norm": Label("gradient norm before clipping", "L2 norm", NON_NEGATIVE),
    metric_keys.POLICY_CLIP_FRACTION: Label("tokens where PPO clipping won", "fraction of tokens", FRACTION),
    metric_keys.UPDATE_SKIPPED_NONFINITE_STEPS: Label("optimizer steps skipped (NaN/inf gradient)", "optimizer steps",
                                                      NON_NEGATIVE),
    metric_keys.EVAL_REWARD: Label("held-out mean reward", "reward", FRACTION),
    metric_keys.EVAL_NUM_TASKS: Label("held-out tasks evaluated", "tasks", NON_NEGATIVE),
    metric_keys.EVAL_NUM_MASKED: Label("held-out episodes masked", "episodes", NON_NEGATIVE),
}

TIMING_PARTS = [
    (metric_keys.TIMING_WAIT_FOR_ROLLOUTS_S, "rollouts (trainer waiting)"),
    (metric_keys.TIMING_UPDATE_S, "update"),
    (metric_keys.TIMING_WEIGHT_SYNC_S, "weight sync"),
    (metric_keys.TIMING_WEIGHT_SYNC_WAIT_S, "weight sync wait"),
    (metric_keys.TIMING_EVAL_S, "held-out eval"),
    (metric_keys.TIMING_EXPORT_S, "HF export"),
    ("timing/checkpoint_s", "checkpoint"),
]
"""The trainer thread's phases of a step, in order: with ``other`` (advantages, logging) they
partition ``timing/step_s``. ``timing/rollout_s`` is not one of them: in the pipeline the
collection runs in another thread and overlaps the step (it is drawn as a marker)."""

OUTCOME_COLORS = {"passed": "#2ca02c", "failed": "#d62728", "context_overflow": "#ff7f0e",
                  "agent_timeout": "#e377c2", "parse_failures": "#bcbd22", "verifier_timeout": "#9467bd"}
"""Outcome colours by meaning: pass green, fail red; any other outcome (infrastructure, masked)
takes a grey from :data:`OTHER_OUTCOME_GREYS`."""
OTHER_OUTCOME_GREYS = ["#7f7f7f", "#a6a6a6", "#595959", "#c7c7c7", "#404040"]


def label_of(key: str) -> Label:
    """The label of ``key``; an unlisted key is titled by itself (``eval/pass@k`` is a fraction)."""
    if key in LABELS:
        return LABELS[key]
    if key.startswith("eval/pass@"):
        return Label(f"held-out {key.removeprefix('eval/')}", "fraction of tasks", FRACTION)
    return Label(key, "")


def title_of(key: str) -> str:
    """``mean response length (tokens)``: the subplot title of ``key``."""
    label = label_of(key)
    return f"{label.title} ({label.unit})" if label.unit else label.title


def outcome_color(name: str, others: list[str]) -> str:
    """Colour of outcome ``name``; ``others`` (the non-listed outcomes of the figure, in order)
    share the greys."""
    if name in OUTCOME_COLORS:
        return OUTCOME_COLORS[name]
    return OTHER_OUTCOME_GREYS[others.index(name) % len(OTHER_OUTCOME_GREYS)] if name in others else "#7f7f7f"
