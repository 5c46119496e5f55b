"""data.quarantine with the real prompt sampler: a flagged task leaves the epochs that start after
step s + k + 1, the same batches whatever the producer's lead (<= k), the drop is in the step's
record, and a resume from any step's state draws the same batches."""

from __future__ import annotations

import json

from swerl.agent.trajectory import Trajectory
from swerl.trainer.rollouts.quarantine import Quarantine
from swerl.trainer.rollouts.sampler import PromptSampler
from swerl.task_health import QuarantineConfig

NAMES = ["always", "b", "c", "d", "e", "f"]
CFG = QuarantineConfig(last_groups=1, flags=["saturated"])


def _trajs(names: list[str]) -> list[Trajectory]:
    """Two samples per task; only ``always`` passes."""
    return [Trajectory(task_name=n, group_id=n, sample_index=i, prompt_ids=[1], reward=float(n == "always"),
                       outcome="passed" if n == "always" else "failed") for n in names for i in range(2)]


def _simulate(k: int, lead: int, steps: int = 9, resume_at: int | None = None) -> tuple[list, dict]:
    """Draw batches ``lead`` steps ahead of the trainer (as a producer may, lead <= k), observe
    each in step order; optionally rebuild everything from step ``resume_at``'s saved state."""
    sampler = PromptSampler(len(NAMES), 2, seed=0)
    quarantine = Quarantine(CFG, NAMES, sampler, k)
    drawn: dict[int, tuple[int, list[int], dict]] = {}
    records: dict[int, dict] = {}
    saved: dict[int, tuple[dict, dict]] = {}
    step = 1
    while step <= steps:
        while len(drawn) < step + lead and len(drawn) < steps:
            epoch, indices = sampler.next_batch()
            drawn[len(drawn) + 1] = (epoch, indices, sampler.state_dict())
        epoch, indices, state = drawn[step]
        records[step] = quarantine.observe(step, epoch, _trajs([NAMES[i] for i in indices]), state)
        saved[step] = (json.loads(json.dumps(state)), json.loads(json.dumps(quarantine.state_dict())))
        if step == resume_at:  # a fresh process: sampler and ledger from the checkpoint of this step
            sampler = PromptSampler(len(NAMES), 2, seed=0)
            sampler.load_state_dict(saved[step][0])
            quarantine = Quarantine(CFG, NAMES, sampler, k)
            quarantine.load_state_dict(saved[step][1])
            drawn = {s: v for s, v in drawn.items() if s <= step}
        step += 1
    return [(e, [NAMES[i] for i in idx]) for e, idx, _ in (drawn[s] for s in range(1, steps + 1))], records


def test_a_saturated_task_leaves_the_epochs_after_the_decision():
    batches, records = _simulate(k=0, lead=0)
    assert [e for e, _ in batches[:3]] == [0, 0, 0] and "always" in sum((b for _, b in batches[:3]), [])
    assert records[3] == {"quarantine/dropped": 1.0, "quarantine/num_quarantined": 1.0,
                          "quarantine/saturated/always": 4.0}
    assert all("always" not in names for _, names in batches[3:])
    assert [e for e, _ in batches[3:]] == [1, 1, 2, 2, 3, 3]  # 5 tasks: 2 batches per epoch now
    assert records[1] == {} and records[5] == {"quarantine/dropped": 0.0, "quarantine/num_quarantined": 1.0}


def test_the_batches_do_not_depend_on_the_producers_lead():
    batches, records = _simulate(k=2, lead=0)
    assert records[3]["quarantine/saturated/always"] == 6.0  # s + k + 1
    assert "always" in sum((b for _, b in batches[3:5]), [])  # steps 4, 5 may be drawn already
    assert all("always" not in names for _, names in batches[5:])
    for lead in (1, 2):
        assert _simulate(k=2, lead=lead) == (batches, records)


def test_a_resume_from_any_step_draws_the_same_batches():
    for k, lead in ((0, 0), (2, 2)):
        full = _simulate(k, lead)
        for resume_at in range(1, 8):
            assert _simulate(k, lead, resume_at=resume_at) == full, (k, lead, resume_at)


def test_never_fewer_tasks_than_one_batch():
    sampler = PromptSampler(3, 2, seed=0)
    quarantine = Quarantine(QuarantineConfig(last_groups=1, flags=["never_solved"]), ["x", "y", "z"], sampler, 0)
    epoch, indices = sampler.next_batch()
    metrics = quarantine.observe(1, epoch, _trajs([["x", "y", "z"][i] for i in indices]), sampler.state_dict())
    assert metrics["quarantine/dropped"] == 1.0  # both were never solved; one stays so a batch can be drawn
    assert sampler.next_batch()[1] and sampler.batches_per_epoch == 1


def test_quarantine_is_off_in_the_seed_preset():
    from pathlib import Path

    from swerl.trainer.config import load_train_config

    seed = load_train_config(Path(__file__).resolve().parents[3] / "examples" / "rloo-seqnorm-tis-qwen3-8b.yaml")
    assert seed.data.quarantine is None and seed.data.exclude is None
