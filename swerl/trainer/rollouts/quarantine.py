"""``data.quarantine``: tasks the task health ledger flags leave the prompt order of later epochs.

Stage: ``trainer/`` (the loop's trainer thread, every rank alike: all ranks see every batch).
Every batch the trainer takes is added to a :class:`~swerl.task_health.TaskLedger`. At
the end of an epoch (its last batch taken), the tasks flagged by the configured rules and flags
are marked in the prompt sampler, to be left out of every epoch that starts after step
``s + k + 1`` (s = the epoch's last step, k = ``loop.max_staleness_steps``): a rollout producer
may already have drawn the k batches after s, so the mark applies to the same steps on every
run, however fast the producer is, and a resume redraws the same batches.

The run keeps its number of steps (later epochs are shorter). A drop that would leave fewer
tasks than one batch is not made (logged). Every drop is in the record of the step that decided
it: ``quarantine/dropped`` (tasks dropped at this step), ``quarantine/num_quarantined`` (all so
far) and ``quarantine/<flag>/<task>`` = the step from which the task may be left out.
"""

from __future__ import annotations

import logging
from typing import Any

from swerl.agent.records import sample_record
from swerl.trainer.rollouts.sampler import PromptSampler
from swerl.task_health import QuarantineConfig, TaskLedger

log = logging.getLogger(__name__)


def epoch_ended(epoch: int, sampler_state: dict) -> bool:
    """Whether the batch whose first prompt is of ``epoch`` ended that epoch: the sampler (its state
    right after the batch) has drawn the epoch's last usable prompt, or moved past it (dynamic
    sampling's extra prompts may cross into the next epoch)."""
    if sampler_state["epoch"] > epoch:
        return True
    return sampler_state.get("epoch_done", sampler_state["batch_in_epoch"] >= sampler_state["batches_in_epoch"])


class Quarantine:
    """The ledger and the drops of one run.

    Args:
        cfg: ``data.quarantine``. task_names: the run's tasks, by sampler index.
        sampler: the run's prompt sampler (marked at epoch ends). max_staleness: k.
    """

    def __init__(self, cfg: QuarantineConfig, task_names: list[str], sampler: PromptSampler, max_staleness: int) -> None:
        self.cfg = cfg
        self.index = {name: i for i, name in enumerate(task_names)}
        self.sampler = sampler
        self.k = max_staleness
        self.ledger = TaskLedger()
        self.dropped: dict[str, int] = {}

    def observe(self, step: int, epoch: int, trajectories: list[Any], sampler_state: dict) -> dict[str, float]:
        """Add batch ``step`` (every episode it generated) to the ledger; at an epoch's last batch,
        mark the flagged tasks.

        Returns: the ``quarantine/*`` metrics of the step (empty unless it ended an epoch).
        """
        self.ledger.observe(step, epoch, [sample_record(t) for t in trajectories])
        if not epoch_ended(epoch, sampler_state):
            return {}
        from_step = step + self.k + 1
        picked = self._pick(step)
        self.sampler.quarantine({self.index[name]: from_step for name in picked})
        self.dropped.update({name: from_step for name in picked})
        metrics = {"quarantine/dropped": float(len(picked)), "quarantine/num_quarantined": float(len(self.dropped))}
        for name, flag in picked.items():
            metrics[f"quarantine/{flag}/{name}"] = float(from_step)
        if picked:
            log.info("quarantine at step %d (end of epoch %d): %s left out of epochs from step %d on", step, epoch,
                     ", ".join(f"{name} ({flag})" for name, flag in picked.items()), from_step)
        return metrics

    def _pick(self, step: int) -> dict[str, str]:
        """Task -> the first of its flags that drops it, among tasks not dropped yet; never so many
        that fewer tasks than one batch remain."""
        picked = {}
        for row in self.ledger.flag(self.cfg):
            flag = next((f for f in self.cfg.flags if f in row.flags), None)
            if flag is not None and row.task not in self.dropped and row.task in self.index:
                picked[row.task] = flag
        room = self.sampler.num_tasks - len(self.dropped) - self.sampler.batch_size
        if len(picked) > room:
            kept = sorted(picked)[max(room, 0):]
            log.warning("quarantine at step %d: %d flagged tasks stay (%s): dropping them would leave fewer tasks "
                        "than loop.train_batch_size", step, len(kept), ", ".join(kept))
            picked = {name: picked[name] for name in sorted(picked)[: max(room, 0)]}
        return picked

    def state_dict(self) -> dict[str, Any]:
        """The ledger and the drops (a checkpoint's trainer state holds them)."""
        return {"ledger": self.ledger.state_dict(), "dropped": dict(self.dropped)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`, and the sampler's marks of every drop decided up to the checkpoint."""
        self.ledger.load_state_dict(state["ledger"])
        self.dropped = {name: int(step) for name, step in state["dropped"].items()}
        self.sampler.quarantine({self.index[name]: step for name, step in self.dropped.items() if name in self.index})
