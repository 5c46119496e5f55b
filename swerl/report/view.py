"""``swerl view``: read episodes as a researcher does: groups, then episodes (reward, advantage,
outcome, what the verifier says), then one conversation turn by turn, in the terminal (rich) or as a
static HTML page.

Stage: after the trainer; reads files only. Sources: a ``swerl train`` run directory
(``trajectories/step_N.jsonl``, written with ``logging.dump_trajectories``) or a ``swerl eval``
output folder (``trajectories.jsonl`` + ``summary.json``). The transcript recorded with each
episode is shown; a record without one is decoded from its token ids with the run's tokenizer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swerl import metric_keys
from swerl.errors import ConfigError
from swerl.report.runs import read_config
from swerl.run_layout import EVAL_SUMMARY_FILE, EVAL_TRAJECTORIES_FILE, TRAJECTORIES_DIR, step_file_name
from swerl.run_layout import STEP_FILE_RE as STEP_FILE
from swerl.text import counted, did_you_mean

if TYPE_CHECKING:
    from rich.console import Console

TAMPER_OUTCOMES = frozenset({"no_reward_file", "bad_reward"})
"""Verifier outcomes that flag a reward file the policy may have tampered with."""


@dataclass
class Episode:
    """One episode as shown (train dumps and eval records normalized to these fields).

    ``advantage`` is None for eval records; ``messages`` is a list of ``{"role", "content"}``.
    ``step``: the training step (None for eval). Token facts: ``hit_length_limit`` (a turn was
    cut at ``max_new_tokens``), ``response_tokens`` (every id after the prompt: generated and
    observation), ``trained_tokens`` (ids with ``loss_mask`` 1: what the update sees; 0 for a
    masked episode).
    ``tamper`` holds the episode's tamper reasons (empty for none, and for records that predate them).
    """

    task: str
    group_id: str
    sample_index: int
    reward: float
    advantage: float | None
    outcome: str
    failure_class: str
    end_reason: str
    num_turns: int
    generated_tokens: int
    verifier_tail: str
    detail: str
    messages: list[dict[str, Any]]
    step: int | None = None
    hit_length_limit: bool = False
    response_tokens: int = 0
    trained_tokens: int = 0
    tamper: list[str] = field(default_factory=list)

    @property
    def masked(self) -> bool:
        """The episode left the update (an infrastructure failure or a masked overflow)."""
        return self.failure_class == "mask"

    @property
    def tampered(self) -> bool:
        """The episode looks like an attempt on the verifier: it has tamper reasons (the sandbox's
        tamper signal) or the verifier found its reward file missing or malformed."""
        return bool(self.tamper) or self.outcome in TAMPER_OUTCOMES


@dataclass
class EpisodeSet:
    """Episodes of one step of a run (``kind="train"``) or of one eval (``kind="eval"``)."""

    source: Path
    kind: str
    step: int | None
    episodes: list[Episode]
    steps_available: list[int] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def groups(self) -> dict[str, list[Episode]]:
        """Episodes by group id (by step and group id when the set spans steps), in first-appearance order."""
        out: dict[str, list[Episode]] = {}
        for ep in self.episodes:
            key = ep.group_id if self.kind == "eval" or self.step is not None else f"step {ep.step}: {ep.group_id}"
            out.setdefault(key, []).append(ep)
        return out


def _decode_messages(record: dict[str, Any], tokenizer: _LazyTokenizer) -> list[dict[str, Any]]:
    """A transcript rebuilt from ids: the prompt, then runs of generated (assistant) and
    observation ids, split where ``loss_mask`` changes (for display only)."""
    messages = [{"role": "prompt", "content": tokenizer.decode(record.get("prompt_ids", []))}]
    ids, mask = record.get("response_ids", []), record.get("loss_mask", [])
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or mask[i] != mask[start]:
            role = "assistant" if mask[start] else "observation"
            messages.append({"role": role, "content": tokenizer.decode(ids[start:i])})
            start = i
    return messages


class _LazyTokenizer:
    """The run's tokenizer (``model.path`` of RUN_DIR/config.yaml), loaded on first use."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self._tok = run_dir, None

    def decode(self, ids: list[int]) -> str:
        if self._tok is None:
            config = read_config(self.run_dir)
            path = (config.get("model") or {}).get("path")
            if not path:
                raise ConfigError(f"{self.run_dir}: a record has no transcript and config.yaml names no model.path "
                                  "to decode its token ids with")
            from transformers import AutoTokenizer

            self._tok = AutoTokenizer.from_pretrained(path)
        return self._tok.decode(ids)


def _episode(record: dict[str, Any], tokenizer: _LazyTokenizer) -> Episode:
    messages = record.get("messages") or []
    if not messages and record.get("prompt_ids"):
        messages = _decode_messages(record, tokenizer)
    generated = record.get("num_policy_tokens", record.get("generated_tokens"))
    if generated is None:
        generated = sum(record.get("loss_mask", []))
    return Episode(
        task=str(record.get("task_name", record.get("task", "?"))),
        group_id=str(record.get("group_id", "?")),
        sample_index=int(record.get("sample_index", 0)),
        reward=float(record.get("reward", 0.0)),
        advantage=None if record.get("advantage") is None else float(record["advantage"]),
        outcome=str(record.get("outcome", "unknown")),
        failure_class=str(record.get("failure_class", "none")),
        end_reason=str(record.get("end_reason", "unknown")),
        num_turns=int(record.get("num_turns", 0)),
        generated_tokens=int(generated),
        verifier_tail=str(record.get("verifier_output_tail", "")),
        detail=str(record.get("detail", "")),
        messages=messages,
        step=None if record.get("global_step") is None else int(record["global_step"]),
        hit_length_limit=bool(record.get("hit_length_limit", False)),
        response_tokens=len(record.get("response_ids", [])),
        trained_tokens=int(sum(record.get("loss_mask", []))),
        tamper=[str(r) for r in record.get("tamper") or []],
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for lineno, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if text.strip():
            try:
                out.append(json.loads(text))
            except json.JSONDecodeError as err:
                raise ConfigError(f"{path}:{lineno}: not a JSON line ({err.msg})") from err
    return out


def load_episodes(source: Path, step: int | None = None, all_steps: bool = False) -> EpisodeSet:
    """Read the episodes of a train run's step (default: the latest dumped; every dumped step
    with ``all_steps`` and no ``step``) or of an eval folder.

    Raises: ConfigError naming the folder and the fix (no trajectories, unknown step, bad line).
    """
    if not source.is_dir():
        raise ConfigError(f"{source} does not exist: pass the run directory of a swerl train run or an output folder "
                          "of swerl eval")
    if (source / EVAL_TRAJECTORIES_FILE).is_file():
        summary_path = source / EVAL_SUMMARY_FILE
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        records = _read_jsonl(source / EVAL_TRAJECTORIES_FILE)
        return EpisodeSet(source, "eval", None, [_episode(r, None) for r in records], summary=summary)
    folder = source / TRAJECTORIES_DIR
    steps = sorted(int(m.group(1)) for p in folder.glob("step_*.jsonl") if (m := STEP_FILE.match(p.name)))
    if not steps:
        raise ConfigError(f"{source}: no trajectories/step_N.jsonl nor trajectories.jsonl: pass a swerl eval output "
                          "folder, or a run trained with logging.dump_trajectories: true")
    chosen = steps[-1] if step is None else step
    if chosen not in steps:
        raise ConfigError(f"--step {step}: {folder} has steps {', '.join(map(str, steps))}; pick one of them")
    tokenizer = _LazyTokenizer(source)
    read = steps if all_steps and step is None else [chosen]
    episodes = [_episode(r, tokenizer) for s in read for r in _read_jsonl(folder / step_file_name(s))]
    return EpisodeSet(source, "train", None if len(read) > 1 else chosen, episodes, steps_available=steps)


def _content(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, indent=1)
    if message.get("tool_calls"):
        text += "\n[tool_calls] " + json.dumps(message["tool_calls"], ensure_ascii=False)
    return text


def _adv(ep: Episode) -> str:
    return "-" if ep.advantage is None else f"{ep.advantage:+.4f}"


_BANNER = re.compile(r"^[=_!*-]{3,}\s*(.*?)\s*[=_!*-]{3,}$")  # pytest's ==== 1 failed in 0.2s ==== lines


def verifier_reason(tail: str, detail: str, width: int = 80) -> str:
    """What a user can act on from an episode's verifier output, one line of at most ``width``
    characters: the first pytest ``E   ...`` line (the exception or failed assertion), else the
    message of a ``FAILED ... - message`` summary line, else the last non-empty line without
    pytest's ``====`` banner, else ``detail`` (e.g. ``reward 0 (test.sh exit 2)`` or a sandbox
    error)."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    failed = [line.split(" - ", 1)[1] for line in lines if line.startswith(("FAILED ", "ERROR ")) and " - " in line]
    last = _BANNER.sub(r"\1", lines[-1]) if lines else ""
    reason = (errors or failed or [last])[0] or detail.strip()
    reason = " ".join(reason.split())
    return reason if len(reason) <= width else reason[: width - 1] + "…"


def tamper_cell(reasons: list[str]) -> str:
    """The episodes table's tamper cell: ``-`` for none, else the count and the first reason's family."""
    if not reasons:
        return "-"
    return f"{len(reasons)}: {reasons[0].split(':', 1)[0]}"


def describe(eps: EpisodeSet) -> str:
    """``RUN: step 2 (dumped steps: 1, 2), 8 episodes in 2 groups``: what a view shows."""
    steps = ", ".join(map(str, eps.steps_available))
    where = "eval" if eps.kind == "eval" else f"steps {steps}" if eps.step is None else (
        f"step {eps.step} (dumped steps: {steps})")
    return f"{eps.source}: {where}, {counted(len(eps.episodes), 'episode')} in {counted(len(eps.groups()), 'group')}"


def pick(eps: EpisodeSet, task: str | None, sample: int | None) -> list[Episode]:
    """Episodes whose conversation the terminal shows: the ``task`` (and ``sample``) asked for,
    else the first episode with a non-zero advantage (else the first)."""
    if task is not None:
        chosen = [e for e in eps.episodes if e.task == task and (sample is None or e.sample_index == sample)]
        if not chosen:
            asked = f"--task {task}" + (f" --sample {sample}" if sample is not None else "")
            samples = sorted({e.sample_index for e in eps.episodes if e.task == task})
            if samples:
                raise ConfigError(f"{asked}: no such sample; {task} has samples {', '.join(map(str, samples))}")
            raise ConfigError(f"{asked}: no such task here; {did_you_mean(task, sorted({e.task for e in eps.episodes}), 12, 'tasks')}")
        return chosen
    signal = [e for e in eps.episodes if e.advantage]
    return (signal or eps.episodes)[:1]


def render_terminal(eps: EpisodeSet, console: Console, task: str | None = None, sample: int | None = None) -> None:
    """Print groups, episodes and the picked conversations to a rich ``console``."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    console.print(describe(eps), highlight=False)
    for key in [k for k in eps.summary if k.startswith("pass@")] + [metric_keys.REWARD_MEAN]:
        if key in eps.summary:
            console.print(f"  {key}: {eps.summary[key]:.4f}", highlight=False)
    groups = Table(title="groups", title_justify="left")
    for col in ("group", "task", "n", "mean reward", "rewards", "advantages"):
        groups.add_column(col, overflow="fold")
    for gid, members in eps.groups().items():
        rewards = [e.reward for e in members]
        groups.add_row(gid, members[0].task, str(len(members)), f"{sum(rewards) / len(rewards):.3f}",
                       " ".join(f"{r:g}" for r in rewards), " ".join(_adv(e) for e in members))
    console.print(groups)
    table = Table(title="episodes", title_justify="left")
    for col in ("task", "sample", "reward", "advantage", "outcome", "class", "end", "turns", "gen tok", "tamper",
                "verifier says"):
        table.add_column(col, overflow="fold")
    for e in eps.episodes:
        table.add_row(e.task, str(e.sample_index), f"{e.reward:g}", _adv(e), e.outcome, e.failure_class,
                      e.end_reason, str(e.num_turns), str(e.generated_tokens), tamper_cell(e.tamper),
                      verifier_reason(e.verifier_tail, e.detail))
    console.print(table)
    suspects = sum(bool(e.tamper) for e in eps.episodes)
    if suspects:
        console.print(f"tamper: {counted(suspects, 'episode')} of {len(eps.episodes)} touched the verifier's territory",
                      style="bold red", highlight=False)
    for e in pick(eps, task, sample):
        console.rule(f"{e.task} sample {e.sample_index}: reward {e.reward:g}, advantage {_adv(e)}, {e.outcome}")
        for turn, message in enumerate(e.messages):
            role = str(message.get("role", "?"))
            style = {"assistant": "green", "user": "blue", "system": "magenta"}.get(role, "yellow")
            console.print(Panel(Text(_content(message)), title=f"[{turn}] {role}", title_align="left",
                                border_style=style))
        if e.verifier_tail or e.detail:
            console.print(Panel(Text(e.verifier_tail or e.detail), border_style="red",
                                title="verifier output (tail)" if e.verifier_tail else "detail"))
        if e.tamper:
            console.print(Panel(Text("\n".join(e.tamper)), border_style="bold red", title="tamper", title_align="left"))
    if task is None and len(eps.episodes) > 1:
        console.print("(pass --task NAME [--sample I] for other conversations, or --out FILE.html for all)")
