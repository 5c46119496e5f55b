"""What the report's panels call each metric: a plain title with its unit, and the range the
metric can take (a fraction lives in [0, 1]; the y axis shows that range, not the noise).

Stage: after the trainer; plain data, no I/O. Keys are those of docs/metrics.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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
    "reward/avg_raw_reward": Label("mean reward of the batch", "reward", FRACTION),
    "reward/avg_pass_at_n": Label("prompts with a passing sample", "fraction of prompts", FRACTION),
    "response_length/mean": Label("mean response length", "tokens", NON_NEGATIVE),
    "response_length/max": Label("longest response", "tokens", NON_NEGATIVE),
    "response_length/clip_fraction": Label("responses cut at max_new_tokens", "fraction of episodes", FRACTION),
    "response_length/reward_pos_mean": Label("mean length, rewarded episodes", "tokens", NON_NEGATIVE),
    "response_length/reward_zero_mean": Label("mean length, unrewarded episodes", "tokens", NON_NEGATIVE),
    "response_length/masked_mean": Label("mean length, masked episodes", "tokens", NON_NEGATIVE),
    "tis/imp_ratio_mean": Label("TIS importance weight, mean", "ratio"),
    "tis/imp_ratio_capped_fraction": Label("TIS weights at the cap", "fraction of tokens", FRACTION),
    "tis/log_ratio_abs_mean": Label("|log pi_train - log pi_sampler|, mean", "nats per token", NON_NEGATIVE),
    "tis/rows_without_logprobs": Label("rows without sampler log-probs", "rows", NON_NEGATIVE),
    "async/staleness_mean": Label("rollout staleness, mean", "steps", NON_NEGATIVE),
    "async/staleness_max": Label("rollout staleness, max", "steps", NON_NEGATIVE),
    "loss/policy": Label("policy loss", "loss"),
    "grad_norm": Label("gradient norm before clipping", "L2 norm", NON_NEGATIVE),
    "policy/clip_fraction": Label("tokens where PPO clipping won", "fraction of tokens", FRACTION),
    "update/skipped_nonfinite_steps": Label("optimizer steps skipped (NaN/inf gradient)", "optimizer steps", NON_NEGATIVE),
    "eval/reward": Label("held-out mean reward", "reward", FRACTION),
    "eval/num_tasks": Label("held-out tasks evaluated", "tasks", NON_NEGATIVE),
    "eval/num_masked": Label("held-out episodes masked", "episodes", NON_NEGATIVE),
}

TIMING_PARTS = [
    ("timing/wait_for_rollouts_s", "rollouts (trainer waiting)"),
    ("timing/update_s", "update"),
    ("timing/weight_sync_s", "weight sync"),
    ("timing/weight_sync_wait_s", "weight sync wait"),
    ("timing/eval_s", "held-out eval"),
    ("timing/export_s", "HF export"),
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
