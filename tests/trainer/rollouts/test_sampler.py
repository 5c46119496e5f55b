"""PromptSampler: seeded per-epoch permutations, drop-last batches, resumable position."""

from __future__ import annotations

import pytest

from swerl.errors import ConfigError
from swerl.trainer.rollouts.sampler import PromptSampler


def take(sampler: PromptSampler, n: int) -> list[tuple[int, list[int]]]:
    return [sampler.next_batch() for _ in range(n)]


def test_same_seed_same_order_other_seed_other_order():
    a, b, c = PromptSampler(10, 3, seed=1), PromptSampler(10, 3, seed=1), PromptSampler(10, 3, seed=2)
    assert take(a, 6) == take(b, 6)
    assert take(PromptSampler(10, 3, seed=1), 3) != take(c, 3)


def test_each_epoch_is_a_fresh_permutation_with_the_tail_dropped():
    s = PromptSampler(10, 3, seed=0)
    batches = take(s, 6)
    assert [e for e, _ in batches] == [0, 0, 0, 1, 1, 1]
    first = [i for _, idx in batches[:3] for i in idx]
    second = [i for _, idx in batches[3:] for i in idx]
    assert len(set(first)) == 9 and len(set(second)) == 9  # no repeats inside an epoch, 1 task dropped
    assert first != second


def test_unshuffled_sampler_keeps_file_order():
    assert take(PromptSampler(4, 2, seed=5, shuffle=False), 3) == [(0, [0, 1]), (0, [2, 3]), (1, [0, 1])]


def test_resume_from_state_continues_the_same_order():
    full = take(PromptSampler(7, 2, seed=3), 8)
    s = PromptSampler(7, 2, seed=3)
    take(s, 5)
    restored = PromptSampler(7, 2, seed=3)
    restored.load_state_dict(s.state_dict())
    assert take(restored, 3) == full[5:]


def test_state_from_another_task_set_is_refused():
    s = PromptSampler(7, 2, seed=3)
    other = PromptSampler(8, 2, seed=3)
    with pytest.raises(ConfigError, match="num_tasks"):
        other.load_state_dict(s.state_dict())


def test_batch_larger_than_task_set_cannot_sample():
    s = PromptSampler(3, 4, seed=0)
    assert s.batches_per_epoch == 0
    with pytest.raises(ConfigError, match="train_batch_size=4"):
        s.next_batch()


def test_extra_prompts_continue_the_order_across_epochs():
    """Dynamic sampling's extra draws take the next prompts of the same permutations (the drop-last
    tail stays dropped), and the next step starts right after them."""
    plain = PromptSampler(7, 2, seed=3)
    stream = [i for e in range(4) for i in plain.epoch_order(e)[:6]]  # 3 batches of 2 per epoch, tail dropped
    s = PromptSampler(7, 2, seed=3)
    drawn = s.next_batch()[1] + s.next_prompts(1) + s.next_prompts(2)
    epoch, second = s.next_batch()
    drawn += second + s.next_prompts(3)  # crosses into epoch 1
    assert drawn == stream[:10] and epoch == 0 and s.epoch == 1 and s.drawn_in_epoch == 4
    assert s.next_batch() == (1, stream[10:12])
    assert s.steps_drawn == 3  # extra draws are no steps


def test_a_resume_after_extra_prompts_draws_the_same_prompts():
    def run(sampler: PromptSampler, steps: range) -> list:
        return [(sampler.next_batch(), sampler.next_prompts(step % 3)) for step in steps]

    full = run(PromptSampler(9, 2, seed=1), range(7))
    s = PromptSampler(9, 2, seed=1)
    run(s, range(4))
    restored = PromptSampler(9, 2, seed=1)
    restored.load_state_dict(s.state_dict())
    assert run(restored, range(4, 7)) == full[4:]


def test_a_checkpoint_without_the_prompt_position_resumes_at_its_batch():
    s = PromptSampler(7, 2, seed=3)
    take(s, 2)
    state = {k: v for k, v in s.state_dict().items() if k not in ("drawn_in_epoch", "epoch_done")}
    restored = PromptSampler(7, 2, seed=3)
    restored.load_state_dict(state)
    assert take(restored, 3) == take(s, 3)


def test_peek_shows_the_next_batch_without_drawing_it_across_an_epoch_end():
    sampler = PromptSampler(num_tasks=5, batch_size=2, seed=3)
    for _ in range(4):  # 2 batches an epoch: the third peek crosses into epoch 1
        peeked = sampler.peek_batch()
        assert sampler.peek_batch() == peeked
        assert sampler.next_batch()[1] == peeked
    assert sampler.steps_drawn == 4 and sampler.epoch == 1


def test_the_next_batch_is_planned_with_its_own_tasks_and_trials_once_a_batch_is_collected():
    """``Context.prewarm_next`` plans the warm pools of the batch the sampler draws next (this
    rank's share of it, n_samples trials per task) and draws nothing."""
    from types import SimpleNamespace

    from swerl.trainer.rollouts.pipeline import Context

    calls = []
    runner = SimpleNamespace(concurrency=6, prewarm=lambda tasks, episodes, trials: calls.append((tasks, episodes, trials)))
    sampler = PromptSampler(num_tasks=8, batch_size=2, seed=0)
    tasks = [f"task-{i}" for i in range(8)]
    for rank in (0, 1):
        ctx = Context(config=SimpleNamespace(n_samples=4), tasks=tasks, sampler=sampler, generator=None, model=None,
                      run_dir=None, info=SimpleNamespace(rank=rank, world_size=2), clock=None, emit_rollout=None)
        ctx.prewarm_next(runner, step=1)
    upcoming = [tasks[i] for i in sampler.next_batch()[1]]
    assert calls == [([upcoming[0]], 4, 4), ([upcoming[1]], 4, 4)]
