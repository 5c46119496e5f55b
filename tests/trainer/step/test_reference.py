"""The KL term's reference policy: a frozen copy of the initial policy, loaded from model.path,
and the update that computes pi_ref once per step beside pi_old."""

from __future__ import annotations

import pytest
import torch

from swerl.rl.config import AlgorithmConfig
from swerl.trainer.step.batch import collate, row_from_trajectory
from swerl.trainer.config import ModelConfig
from swerl.trainer.distributed import DistInfo
from swerl.trainer.step.reference import FrozenReference, load_reference
from swerl.trainer.step.update import UpdateSettings, forward_logprobs, train_on_batch

from .._support import build_tiny_model, make_trajectories

KL = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2, use_kl_loss=True, kl_loss_coef=0.5)


def _rows():
    trajs = make_trajectories(num_groups=2, group_size=4, seed=3)
    advantages = [0.5, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # group 2 has no policy signal
    return [row_from_trajectory(t, a) for t, a in zip(trajs, advantages)]


def test_loaded_reference_is_the_frozen_initial_policy_and_keeps_the_rng(tiny_model_dir):
    torch.manual_seed(123)
    state = torch.get_rng_state()
    ref = load_reference(ModelConfig(path=str(tiny_model_dir), device="cpu"), tiny_model_dir, DistInfo(), 0.7, None)
    assert torch.equal(torch.get_rng_state(), state)
    assert not any(p.requires_grad for p in ref.module.parameters()) and not ref.module.training
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    mb = collate(_rows()[:3])
    with torch.no_grad():
        want, _ = forward_logprobs(initial, mb, 0.7)
    assert torch.equal(ref.logprobs(mb), want)


def test_kl_is_zero_on_the_first_step_and_grows_as_the_policy_moves():
    # Reference == initial policy: the first optimizer step sees KL = 0, later ones KL > 0; rows
    # with A = 0 are forwarded (the KL term trains them) and their pi_ref is computed.
    model = build_tiny_model(16, seed=0)
    reference = FrozenReference(build_tiny_model(16, seed=0), 0.7)
    opt = torch.optim.SGD(model.parameters(), lr=5.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=8, micro_batch_size=3, update_epochs=1, grad_clip=None)
    first = train_on_batch(model, opt, sched, _rows(), KL, s, DistInfo(), reference)
    assert first["loss/kl"] == 0.0 and first["policy/kl_ref_mean"] == 0.0 and first["loss/kl_share"] == 0.0
    second = train_on_batch(model, opt, sched, _rows(), KL, s, DistInfo(), reference)
    assert second["policy/kl_ref_mean"] > 0 and 0 < second["loss/kl_share"] < 1
    assert second["loss/total"] == pytest.approx(second["loss/policy"] + 0.5 * second["loss/kl"], rel=1e-5)
    with pytest.raises(ValueError, match="reference"):
        train_on_batch(model, opt, sched, _rows(), KL, s, DistInfo())


def test_kl_moves_rows_without_advantage():
    # Only A = 0 rows: without KL nothing changes; with KL (reference != policy) the weights move.
    rows = [r for r in _rows() if r.advantage == 0.0]
    for algo, moves in ((AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2), False), (KL, True)):
        model = build_tiny_model(16, seed=0)
        before = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        s = UpdateSettings(temperature=0.7, rows_per_mini_batch=6, micro_batch_size=2, grad_clip=None)
        train_on_batch(model, opt, sched, rows, algo, s, DistInfo(), FrozenReference(build_tiny_model(16, seed=9), 0.7))
        changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        assert changed is moves


def test_lora_reference_is_the_policy_with_its_adapters_off_and_the_kl_grows_as_they_train(tiny_model_dir):
    # Under model.lora the reference is no copy: the policy's own frozen base. Its log-probs equal
    # the initial model's before and after the adapters train; the KL starts at 0 and then grows.
    from transformers import AutoModelForCausalLM

    from swerl.trainer.config import LoraConfig
    from swerl.trainer.policy.model import load_policy
    from swerl.trainer.step.reference import AdaptersOffReference, make_reference

    cfg = ModelConfig(path=str(tiny_model_dir), device="cpu", lora=LoraConfig(rank=4, alpha=8.0))
    torch.manual_seed(0)
    policy, _, path = load_policy(cfg, DistInfo())
    reference = make_reference(cfg, policy, path, DistInfo(), 0.7, None)
    assert isinstance(reference, AdaptersOffReference) and reference.module is policy
    mb = collate(_rows()[:3])
    with torch.no_grad():
        want, _ = forward_logprobs(AutoModelForCausalLM.from_pretrained(tiny_model_dir), mb, 0.7)
    assert torch.allclose(reference.logprobs(mb), want, atol=1e-6)
    trained = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trained, lr=5.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=8, micro_batch_size=3, update_epochs=1, grad_clip=None)
    first = train_on_batch(policy, opt, sched, _rows(), KL, s, DistInfo(), reference)
    second = train_on_batch(policy, opt, sched, _rows(), KL, s, DistInfo(), reference)
    assert first["policy/kl_ref_mean"] == pytest.approx(0.0, abs=1e-7) and second["policy/kl_ref_mean"] > 1e-6
    assert torch.allclose(reference.logprobs(mb), want, atol=1e-6)  # the base never moved
    with torch.no_grad():
        moved, _ = forward_logprobs(policy, mb, 0.7)
    assert not torch.allclose(moved, want, atol=1e-4)
