"""Held-out evaluation during training: every ``eval.interval`` steps (and before the first one
when ``eval.before_train``), the current policy runs ``eval.samples`` episodes of each held-out
task with the run's protocol, limits and sampling, in the run's sandboxes; the step's record
gains ``eval/pass@1``, ``eval/pass@k`` (k = samples), ``eval/reward`` and ``eval/num_tasks``,
and ``RUN_DIR/eval/step_N.jsonl`` keeps every sample's record (task, sample index, seed, pass/fail,
reward, outcome: ``swerl.agent.records``), which ``swerl compare`` pairs task by task.

Seeds: sample i of task t samples with ``eval_episode_seed(eval.seed, t, i)``: the same at every
step, in every run and in ``swerl eval --seed``, whatever the run's training ``seed``. Two runs
(or two steps of one run) evaluated on the same tasks then differ only by their weights.

Stage: ``trainer/`` (rank 0, between the weight sync and the step's record). The figures are
those of ``swerl eval`` (``agent.metrics.summarize``: unbiased pass@k, mean reward), so that
``swerl select-checkpoint --metric eval/pass@1`` ranks exports on held-out tasks.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from swerl import metric_keys
from swerl.agent.metrics import summarize
from swerl.agent.records import write_sample_records
from swerl.run_layout import EVAL_DIR, step_file_name
from swerl.trainer.sections import EvalDuringTrainingConfig

if TYPE_CHECKING:
    from swerl.agent.trajectory import Trajectory
    from swerl.tasks.task_folder import Task
    from swerl.trainer.rollouts.runner import RolloutRunner

log = logging.getLogger(__name__)


def is_due(cfg: EvalDuringTrainingConfig, step: int, last_step: int) -> bool:
    """Whether training step ``step`` ends with an evaluation (every ``interval``, and the last)."""
    return step == last_step or (cfg.interval > 0 and step % cfg.interval == 0)


def eval_metrics(trajectories: list[Trajectory], samples: int) -> dict[str, float]:
    """The ``eval/*`` keys of a step's record from the eval trajectories."""
    summary = summarize(trajectories, ks=[1, samples])
    out = {f"eval/{k}": float(v) for k, v in summary.items() if k.startswith("pass@")}
    out.update({metric_keys.EVAL_REWARD: float(summary[metric_keys.REWARD_MEAN]),
                metric_keys.EVAL_NUM_TASKS: float(summary["num_tasks"]),
                metric_keys.EVAL_NUM_MASKED: float(summary["num_masked"])})
    return out


def run_eval(cfg: EvalDuringTrainingConfig, runner: RolloutRunner, tasks: list[Task], step: int,
             run_dir: Path) -> dict[str, float]:
    """Evaluate the current weights: ``cfg.samples`` episodes per task through the run's rollout
    runner (same protocol, limits and sandboxes as training; seeds of ``cfg.seed``), and write
    their sample records to ``run_dir/eval/step_<step>.jsonl``.

    Returns: the ``eval/*`` metrics and ``timing/eval_s``.
    """
    started = time.monotonic()
    trajectories = runner.collect(tasks, cfg.samples, step, group_prefix=f"eval{step}/", task_seed=cfg.seed)
    write_sample_records(run_dir / EVAL_DIR / step_file_name(step), trajectories, global_step=step)
    out = eval_metrics(trajectories, cfg.samples)
    out[metric_keys.TIMING_EVAL_S] = time.monotonic() - started
    log.info("eval at step %d: pass@1 %.3f, reward %.3f over %d tasks", step, out.get(metric_keys.EVAL_PASS_AT_1, 0.0),
             out[metric_keys.EVAL_REWARD], len(tasks))
    return out
