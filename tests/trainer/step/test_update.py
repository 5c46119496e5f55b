"""The micro-batched policy update: exact accumulation, padding/failed rows, temperature, PPO epochs."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from swerl.rl.advantages import group_index
from swerl.rl.config import AlgorithmConfig
from swerl.rl.loss import compute_advantages
from swerl.trainer.step.batch import collate, row_from_trajectory
from swerl.trainer.distributed import DistInfo
from swerl.trainer.step.update import UpdateSettings, forward_logprobs, train_on_batch, with_old_logprobs

from .._support import build_tiny_model, make_trajectories


def rows_of(trajs, algo):
    rewards = torch.tensor([t.reward for t in trajs])
    exclude = torch.tensor([t.exclude_from_baseline for t in trajs])
    adv, _ = compute_advantages(algo, rewards, group_index([t.group_id for t in trajs]), exclude)
    return [row_from_trajectory(t, float(a)) for t, a in zip(trajs, adv)]


def run_update(rows, algo, micro_batch_size, rows_per_mini=None, update_epochs=1, lr=1e-2, seed=0, skip=True,
               adam=False, **settings):
    model = build_tiny_model(16, seed)
    # SGD: the parameter change is lr * gradient, so parameters compare gradients exactly
    # (Adam's g / sqrt(v) would amplify fp32 noise on near-zero gradient entries).
    opt = torch.optim.AdamW(model.parameters(), lr=lr) if adam else torch.optim.SGD(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=rows_per_mini or len(rows),
                       micro_batch_size=micro_batch_size, update_epochs=update_epochs, grad_clip=None,
                       skip_no_signal_rows=skip, **settings)
    metrics = train_on_batch(model, opt, sched, rows, algo, s, DistInfo())
    return model, metrics


@pytest.mark.parametrize("reduction", ["token_mean", "sequence_mean", "seq_mean_token_sum_norm_global"])
def test_micro_batch_one_equals_whole_batch(reduction):
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2, loss_reduction=reduction, max_seq_len=32)
    trajs = make_trajectories(num_groups=2, group_size=4, seed=1)
    trajs[0] = trajs[0].model_copy(update={"reward": 1.0})
    trajs[1] = trajs[1].model_copy(update={"reward": 0.0})
    rows = rows_of(trajs, algo)
    m1, met1 = run_update(rows, algo, micro_batch_size=1)
    m8, met8 = run_update(rows, algo, micro_batch_size=8)
    assert met1["loss/policy"] == pytest.approx(met8["loss/policy"], rel=1e-5, abs=1e-7)
    assert met1["grad_norm"] == pytest.approx(met8["grad_norm"], rel=1e-4)
    assert met1["grad_norm"] > 0
    for p1, p8 in zip(m1.parameters(), m8.parameters()):
        torch.testing.assert_close(p1, p8, rtol=1e-5, atol=1e-6)


def test_failed_rows_never_reach_the_loss():
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2)
    trajs = make_trajectories(num_groups=1, group_size=4, seed=2)
    trajs[0] = trajs[0].model_copy(update={"reward": 1.0})
    trajs[1] = trajs[1].model_copy(update={"reward": 0.0})
    rows = rows_of(trajs, algo)
    # A masked (infrastructure) failure with a huge fake advantage: its tokens must not count.
    failed = trajs[2].model_copy(update={"failure_class": "mask", "exclude_from_baseline": True})
    poisoned = rows + [row_from_trajectory(failed, advantage=100.0)]
    m_ref, met_ref = run_update(rows, algo, micro_batch_size=2)
    m_pad, met_pad = run_update(poisoned, algo, micro_batch_size=2)
    assert met_ref["policy/num_tokens"] == met_pad["policy/num_tokens"]
    for a, b in zip(m_ref.parameters(), m_pad.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_old_logprobs_use_the_sampling_temperature():
    model = build_tiny_model(16, 0).eval()
    trajs = make_trajectories(num_groups=1, group_size=2, seed=3)
    rows = [row_from_trajectory(t, 0.0) for t in trajs]
    s = UpdateSettings(temperature=0.5, rows_per_mini_batch=2, micro_batch_size=2)
    out = with_old_logprobs(model, rows, s, torch.device("cpu"))
    t, row = trajs[0], out[0]
    ids = torch.tensor([t.prompt_ids + t.response_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float() / 0.5
    ref = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0][len(t.prompt_ids) - 1 :]
    torch.testing.assert_close(row.old_logprobs, ref, rtol=1e-5, atol=1e-5)
    # the T=1 log-probs differ: the temperature is really applied
    mb = collate(rows[:1])
    with torch.no_grad():
        lp1, _ = forward_logprobs(model, mb, 1.0)
    assert not torch.allclose(lp1[0, len(t.prompt_ids) - 1 :], ref)


def test_mini_batches_and_epochs_move_the_ratio_off_one():
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2, eps_clip_low=0.2, eps_clip_high=0.05)
    trajs = make_trajectories(num_groups=2, group_size=4, seed=4)
    for i in (0, 4):
        trajs[i] = trajs[i].model_copy(update={"reward": 1.0})
        trajs[i + 1] = trajs[i + 1].model_copy(update={"reward": 0.0})
    rows = rows_of(trajs, algo)
    _, met = run_update(rows, algo, micro_batch_size=2, rows_per_mini=4, update_epochs=3, lr=20.0)
    assert met["policy/optimizer_steps"] == 6
    assert met["policy/clip_fraction"] > 0  # later steps see pi != pi_old and clip


def test_skipping_rows_without_signal_changes_nothing():
    """Rows with A = 0 are not forwarded, yet loss, clip fraction and weights (AdamW momentum
    included, over two optimizer steps) equal the update that forwards every row."""
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2, loss_reduction="sequence_mean")
    trajs = make_trajectories(num_groups=3, group_size=4, seed=5)
    trajs[0] = trajs[0].model_copy(update={"reward": 1.0})
    trajs[1] = trajs[1].model_copy(update={"reward": 0.0})
    for i in range(4, 12):  # groups 2 and 3: all equal rewards -> A = 0 for 8 of 12 rows
        trajs[i] = trajs[i].model_copy(update={"reward": 1.0})
    rows = rows_of(trajs, algo)
    assert sum(r.advantage != 0 for r in rows) <= 4
    m_all, met_all = run_update(rows, algo, micro_batch_size=2, rows_per_mini=4, update_epochs=2, skip=False, adam=True)
    m_skip, met_skip = run_update(rows, algo, micro_batch_size=2, rows_per_mini=4, update_epochs=2, skip=True, adam=True)
    for key in ("loss/policy", "policy/clip_fraction", "policy/num_tokens", "grad_norm"):
        assert met_skip[key] == pytest.approx(met_all[key], rel=1e-5, abs=1e-8), key
    for a, b in zip(m_all.parameters(), m_skip.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def count_forwards(model) -> list[int]:
    calls = [0]
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
def test_pi_old_from_the_first_training_forward_equals_the_separate_forward(dtype):
    """One update epoch: the first mini-batch's pi_old is its own training forward, detached; losses,
    TIS figures, gradient norm and weights equal the separate pi_old forward's (fp32: to 1e-6
    relative; bf16 autocast: to 1e-5 relative), and that mini-batch's pi_old forward is gone."""
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2, use_tis=True, tis_imp_ratio_cap=2.0)
    trajs = make_trajectories(num_groups=2, group_size=4, seed=6)
    for i in (0, 4):
        trajs[i] = trajs[i].model_copy(update={"reward": 1.0})
        trajs[i + 1] = trajs[i + 1].model_copy(update={"reward": 0.0})
    rows = [replace(r, rollout_logprobs=torch.full_like(r.loss_mask, -1.5, dtype=torch.float32))
            for r in rows_of(trajs, algo)]
    tol = 1e-6 if dtype is None else 1e-5
    calls = {}
    results = {}
    for reuse in (False, True):
        model = build_tiny_model(16, 0)
        calls[reuse] = count_forwards(model)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        s = UpdateSettings(temperature=0.7, rows_per_mini_batch=4, micro_batch_size=2, grad_clip=None,
                           compute_dtype=dtype, reuse_pi_old=reuse)
        metrics = train_on_batch(model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0), rows, algo, s,
                                 DistInfo())
        results[reuse] = (model, metrics)
    (m_ref, met_ref), (m_new, met_new) = results[False], results[True]
    assert calls[False][0] - calls[True][0] == 2  # the first mini-batch's 2 micro-batches: no pi_old forward
    for key in ("loss/policy", "tis/imp_ratio_mean", "tis/log_ratio_abs_mean", "policy/clip_fraction", "grad_norm"):
        assert met_new[key] == pytest.approx(met_ref[key], rel=tol, abs=1e-7), key
    assert met_ref["grad_norm"] > 0 and met_ref["tis/log_ratio_abs_mean"] > 0
    for a, b in zip(m_ref.parameters(), m_new.parameters()):
        torch.testing.assert_close(a, b, rtol=tol, atol=1e-7)


@pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_forward_logprobs_skips_the_prompt_columns_and_equals_the_full_logits_graph(dtype, temperature, monkeypatch):
    """forward_logprobs runs the LM head and the (chunked) log-softmax only from the micro-batch's
    first response column s0 on; there its log-probs, entropies and every parameter gradient equal
    those of the plain graph over the whole (n, L, V) float32 logits (fp32: 1e-6; bf16 autocast:
    1e-5), and the columns before s0 hold 0."""
    from swerl.rl import logprobs
    from swerl.rl.logprobs import next_token_logprobs_unchunked

    monkeypatch.setattr(logprobs, "CHUNK_BYTES", 3 * 16 * 4)  # 3 positions per chunk of the 16-id vocabulary
    mb = collate([row_from_trajectory(t, 1.0) for t in make_trajectories(num_groups=2, group_size=2, seed=7)])
    start = int(mb.response_starts.min())
    assert start > 0  # prompts of 3..6 tokens
    results, kept = [], []
    for full in (True, False):
        model = build_tiny_model(16, 0)
        model.lm_head.register_forward_hook(lambda _m, _i, out: kept.append(out.shape[1]))
        if full:  # the reference: every column through the LM head and the unchunked log-softmax
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits
            lp, ent = next_token_logprobs_unchunked(logits, mb.input_ids, temperature, with_entropy=True)
        else:
            lp, ent = forward_logprobs(model, mb, temperature, with_entropy=True, compute_dtype=dtype)
        ((lp * mb.loss_mask).sum() + 0.1 * (ent * mb.loss_mask).sum()).backward()
        results.append((lp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]))
    assert kept == [mb.input_ids.shape[1], mb.input_ids.shape[1] - start]
    (lp_r, ent_r, grads_r), (lp, ent, grads) = results
    tol = 1e-6 if dtype is None else 1e-5
    assert lp.shape == lp_r.shape and not lp[:, :start].any() and not ent[:, :start].any()
    torch.testing.assert_close(lp[:, start:], lp_r[:, start:], rtol=tol, atol=tol)
    torch.testing.assert_close(ent[:, start:], ent_r[:, start:], rtol=tol, atol=tol)
    for a, b in zip(grads, grads_r):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    assert any(g.abs().max() > 0 for g in grads)
