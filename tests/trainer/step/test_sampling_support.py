"""Sampling-support replay end to end on real parts: the HF backend samples a tiny Llama with
top-k / top-p and returns each token's kept set, the trajectory stores it, the update replays it.
Also the overlong filter's rows, and GSPO / CISPO through ``swerl train`` (Docker)."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
import torch

from swerl.agent.trajectory import Trajectory
from swerl.inference.backends.base import SamplingParams
from swerl.inference.backends.hf import HFBackend
from swerl.inference.backends.sampling import processed_logprobs
from swerl.rl.config import AlgorithmConfig
from swerl.trainer.distributed import DistInfo
from swerl.trainer.step.batch import rows_from_trajectory
from swerl.trainer.step.update import UpdateSettings, train_on_batch

from .._support import build_tiny_model

VOCAB = 48
PROMPTS = [[6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17], [18, 19, 20]]
TOKENIZER = SimpleNamespace(eos_token_id=None, pad_token_id=0)


def _model():
    return build_tiny_model(VOCAB, seed=3).eval()


def _trajectories(backend: HFBackend, top_k: int, top_p: float) -> list[Trajectory]:
    sampling = SamplingParams(temperature=0.7, top_k=top_k, top_p=top_p, max_new_tokens=12)
    gens = backend.generate(PROMPTS, sampling, seeds=[11, 12, 13, 14])
    return [Trajectory(task_name="t", group_id="g", sample_index=i, prompt_ids=p, response_ids=g.token_ids,
                       loss_mask=[1] * len(g.token_ids), rollout_logprobs=g.logprobs, rollout_support=g.support,
                       reward=float(i % 2), turn_weight_versions=[0], num_generated_tokens=len(g.token_ids))
            for i, (p, g) in enumerate(zip(PROMPTS, gens, strict=True))]


def _update(model, trajs, replay: bool, update_epochs: int = 1, policy_loss: str = "regular"):
    model = copy.deepcopy(model)
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2, use_tis=True, policy_loss=policy_loss,
                           sampling_support="replay" if replay else "full")
    rows = [row for i, t in enumerate(trajs)
            for row in rows_from_trajectory(t, 1.0 if i % 2 else -1.0, episode_index=i, trained_version=0)]
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=4, micro_batch_size=2, update_epochs=update_epochs,
                       grad_clip=None, replay_support=replay)
    return model, train_on_batch(model, opt, sched, rows, algo, s, DistInfo())


def test_hf_backend_returns_the_exact_kept_set_of_each_token():
    model = _model()
    trajs = _trajectories(HFBackend(model, TOKENIZER, seed=0), top_k=6, top_p=0.9)
    for traj in trajs:
        ids = torch.tensor([traj.prompt_ids + traj.response_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(traj.prompt_ids) - 1 : -1]
        processed = processed_logprobs(logits, 0.7, 6, 0.9)
        for t, kept in enumerate(traj.rollout_support):
            assert set(kept) == set(torch.isfinite(processed[t]).nonzero()[:, 0].tolist())
            assert traj.response_ids[t] in kept and len(kept) <= 6
    # nothing is stored without truncation
    plain = _trajectories(HFBackend(model, TOKENIZER, seed=0), top_k=0, top_p=1.0)
    assert all(t.rollout_support is None for t in plain)


@pytest.mark.parametrize("update_epochs", [1, 2])  # pi_old from the training forward, and from its own pass
def test_replay_makes_the_ratio_one_and_full_support_shows_the_kept_mass(update_epochs):
    model = _model()
    trajs = _trajectories(HFBackend(model, TOKENIZER, seed=0), top_k=6, top_p=0.9)
    _, full = _update(model, trajs, replay=False, update_epochs=update_epochs)
    _, replay = _update(model, trajs, replay=True, update_epochs=update_epochs)
    mass = replay["tis/log_truncation_mass"]
    assert mass < -0.05 and full["tis/log_truncation_mass"] == pytest.approx(mass, abs=1e-6)
    assert abs(replay["tis/ratio_mean"] - 1.0) < 1e-4
    assert replay["tis/mismatch_log_ratio_abs_mean"] < 1e-4  # lag 0: the mismatch at equal weights
    # full support: log pi_old - log mu = log S_t at equal weights, so the ratio is S_t < 1
    assert full["tis/ratio_mean"] < 1.0 - 0.02
    assert full["tis/log_ratio_abs_mean"] == pytest.approx(-mass, abs=1e-4)


def test_without_truncation_replay_changes_nothing_bit_for_bit():
    model = _model()
    trajs = _trajectories(HFBackend(model, TOKENIZER, seed=0), top_k=0, top_p=1.0)
    m_full, full = _update(model, trajs, replay=False)
    m_replay, replay = _update(model, trajs, replay=True)
    assert full == replay
    assert all(torch.equal(a, b) for a, b in zip(m_full.parameters(), m_replay.parameters(), strict=True))


def test_resumed_sampling_gives_the_same_tokens_and_supports():
    # A resumed run restores the backend generator's state from its checkpoint: the next batch
    # samples the same ids from the same kept sets, and the episode record round-trips them.
    model = _model()
    sampling = SamplingParams(temperature=0.7, top_k=5, top_p=0.95, max_new_tokens=10)
    first = HFBackend(model, TOKENIZER, seed=9)
    first.generate(PROMPTS, sampling)  # step 1
    state = first.rng_state()
    expected = first.generate(PROMPTS, sampling)  # step 2
    resumed = HFBackend(_model(), TOKENIZER, seed=123)
    resumed.set_rng_state(state)
    again = resumed.generate(PROMPTS, sampling)
    assert [g.token_ids for g in again] == [g.token_ids for g in expected]
    assert [g.support for g in again] == [g.support for g in expected]
    traj = Trajectory(task_name="t", group_id="g", prompt_ids=PROMPTS[0], response_ids=again[0].token_ids,
                      loss_mask=[1] * len(again[0].token_ids), rollout_logprobs=again[0].logprobs,
                      rollout_support=again[0].support)
    assert Trajectory.model_validate(json.loads(traj.model_dump_json())).rollout_support == again[0].support


def test_overlong_filter_masks_the_loss_of_responses_cut_by_the_budget():
    traj = Trajectory(task_name="t", group_id="g", prompt_ids=[1, 2], response_ids=[3, 4, 5], loss_mask=[1, 1, 1],
                      hit_length_limit=True)
    assert rows_from_trajectory(traj, 1.0)[0].num_trainable_tokens == 3
    assert rows_from_trajectory(traj, 1.0, overlong_filter=True)[0].num_trainable_tokens == 0
    kept = traj.model_copy(update={"hit_length_limit": False})
    assert rows_from_trajectory(kept, 1.0, overlong_filter=True)[0].num_trainable_tokens == 3


def test_version_lag_follows_each_turn():
    traj = Trajectory(task_name="t", group_id="g", prompt_ids=[1], response_ids=[3, 4, 9, 5, 6],
                      loss_mask=[1, 1, 0, 1, 1], turn_weight_versions=[2, 4])
    assert rows_from_trajectory(traj, 1.0, trained_version=4)[0].version_lag.tolist() == [2, 2, 2, 0, 0]


@pytest.mark.docker
@pytest.mark.parametrize("policy_loss", ["gspo", "cispo"])
def test_gspo_and_cispo_train_two_real_steps_with_replayed_support(tmp_path, tiny_model_dir, policy_loss):
    import yaml
    from typer.testing import CliRunner

    from swerl.cli import app

    from .._support import tiny_run_config

    config = tiny_run_config(tiny_model_dir, logging={"tensorboard": False})
    config["agent"].update(top_k=6, top_p=0.9)
    config["algorithm"].update(policy_loss=policy_loss, sampling_support="replay")
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["train", str(path), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in records] == [1, 2]
    for record in records:
        assert record["tis/log_truncation_mass"] < 0  # top-k / top-p cut mass the trainer sees
        assert abs(record["tis/ratio_mean"] - 1.0) < 1e-3  # replayed: HF samples with the trained module
        assert 0.0 <= record["policy/clip_fraction"] <= 1.0 and record["grad_norm"] > 0
