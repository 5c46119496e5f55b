"""Packed rows (``model.pack_rows``): per-token log-probs, entropies and kept-set masses of packed
rows equal the padded rows' (float64, the model's own head and the chunked head), their gradients
too; an optimizer step (pi_old, reference, entropy, TIS) gives the same weights; the packed forward
holds fewer tokens; auto packs only a model whose attention keeps packed rows apart."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from swerl.errors import ConfigError
from swerl.rl.config import AlgorithmConfig
from swerl.rl.support import NO_TOKEN
from swerl.trainer.distributed import DistInfo
from swerl.trainer.step.batch import MicroBatch, Row, collate
from swerl.trainer.step import update
from swerl.trainer.step.packing import pack_choice, pack_micro_batch, packed_forward, packing_refusal, packs_rows
from swerl.trainer.step.reference import FrozenReference
from swerl.trainer.step.update import UpdateSettings, forward_with_mass, train_on_batch

from .._support import build_tiny_model

VOCAB = 97
SHAPES = [(5, 9), (3, 2), (7, 4), (2, 1), (4, 6)]  # (prompt, response) tokens: rows of 14, 5, 11, 3, 10


def _rows(shapes=SHAPES, seed: int = 0) -> list[Row]:
    g = torch.Generator().manual_seed(seed)
    return [Row(prompt_ids=torch.randint(1, VOCAB, (p,), generator=g), response_ids=torch.randint(1, VOCAB, (t,), generator=g),
                loss_mask=torch.ones(t, dtype=torch.bool), rollout_logprobs=None, advantage=1.0) for p, t in shapes]


def _with_support(mb: MicroBatch, replay: bool) -> MicroBatch:
    """``mb`` with a kept set of 6 ids (the target among them) at every other position, none elsewhere."""
    g = torch.Generator().manual_seed(3)
    kept = torch.randint(1, VOCAB, (*mb.loss_mask.shape, 6), generator=g)
    kept[..., 0] = mb.input_ids[:, 1:]
    kept[:, ::2] = NO_TOKEN
    return replace(mb, support=kept, replay_support=replay)


def _response_values_and_grads(model, mb, chunk, mode):
    """The response columns of forward_with_mass's outputs, and the gradients of a loss that weighs
    every response log-prob and entropy (the loss reads nothing else of the grid)."""
    model.zero_grad(set_to_none=True)
    lp, ent, mass = forward_with_mass(model, mb, 0.7, True, None, chunk, mode)
    weights = torch.randn((2, *lp.shape), generator=torch.Generator().manual_seed(1), dtype=torch.float64) * mb.loss_mask
    ((lp.double() * weights[0]).sum() + (ent.double() * weights[1]).sum()).backward()
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    values = [torch.cat([v.double() for v in mb.response_values(x)]) for x in (lp, ent) + ((mass,) if mass is not None else ())]
    return values, grads


@pytest.mark.parametrize("mode", ["one_sequence", "smallest_square"])
@pytest.mark.parametrize("chunk", [0, 3], ids=["own_head", "chunked_head"])
@pytest.mark.parametrize("support,replay", [(False, False), (True, True)])
def test_packed_rows_give_the_padded_logprobs_entropies_and_gradients_in_float64(mode, chunk, support, replay):
    model = build_tiny_model(VOCAB, seed=2).double()
    mb = collate(_rows())
    mb = _with_support(mb, replay) if support else mb
    assert packs_rows(mb, mode)
    padded_values, padded_grads = _response_values_and_grads(model, mb, chunk, "off")
    packed_values, packed_grads = _response_values_and_grads(model, mb, chunk, mode)
    assert len(packed_values) == (3 if support else 2)
    for want, got in zip(padded_values, packed_values):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for name, grad in padded_grads.items():
        assert grad.abs().max() > 0, name
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-10, atol=1e-12, msg=name)


def test_packed_rows_on_a_lora_model_give_the_adapters_the_same_gradients():
    from swerl.trainer.config import LoraConfig, ModelConfig
    from swerl.trainer.policy.model import prepare_policy

    torch.manual_seed(0)
    model = prepare_policy(build_tiny_model(VOCAB, seed=2), ModelConfig(device="cpu", lora=LoraConfig(rank=4, alpha=8.0)),
                           DistInfo()).double()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    mb = collate(_rows())
    padded_values, padded_grads = _response_values_and_grads(model, mb, 3, "off")
    packed_values, packed_grads = _response_values_and_grads(model, mb, 3, "smallest_square")
    for want, got in zip(padded_values, packed_values):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    trained = [name for name, grad in padded_grads.items() if grad is not None]
    assert trained and all("lora_" in name for name in trained)
    for name in trained:
        torch.testing.assert_close(packed_grads[name], padded_grads[name], rtol=1e-10, atol=1e-12, msg=name)


def test_rows_packed_without_restarting_positions_would_see_each_other():
    """The check above can fail: the same packed ids with one running position (no restart) change the
    second row's log-probs far beyond its tolerance."""
    model = build_tiny_model(VOCAB, seed=2).double()
    packed = pack_micro_batch(collate(_rows()), "one_sequence")
    with torch.no_grad():
        apart = model(input_ids=packed.input_ids, position_ids=packed.position_ids).logits
        mixed = model(input_ids=packed.input_ids, position_ids=torch.arange(packed.input_ids.shape[1])[None]).logits
    first = 14  # the first row's tokens: nothing before them, the same either way
    torch.testing.assert_close(mixed[:, :first], apart[:, :first], rtol=1e-12, atol=1e-12)
    assert (mixed[:, first:] - apart[:, first:]).abs().max() > 1e-6


def test_packing_drops_the_padding_tokens():
    rows = _rows()  # 14 + 5 + 11 + 3 + 10 = 43 tokens
    mb = collate(rows)
    assert mb.input_ids.numel() == 5 * 14  # padded: 27 padding tokens
    one = pack_micro_batch(mb, "one_sequence")
    # first fit into rows of 14: [14], [11, 3], [10], [5]: a square of 4 x 14^2 < 43^2
    longest = pack_micro_batch(mb, "smallest_square")
    assert (one.num_tokens, int((one.input_ids != 0).sum())) == (43, 43)
    assert longest.input_ids.shape == (4, 14) and longest.num_tokens - 43 == 13
    # one long row and short ones: one sequence has the smaller square (28^2 <= 2 x 20^2)
    skewed = collate(_rows([(5, 15), (2, 1), (2, 1), (1, 1)]))
    assert pack_micro_batch(skewed, "smallest_square").input_ids.shape == (1, 28)
    # rows that cannot share a sequence of the longest row, and whose one sequence's square is larger:
    # the padded forward, unchanged
    assert not packs_rows(collate(_rows([(5, 9), (5, 8), (6, 6)])), "smallest_square")
    assert packs_rows(collate(_rows([(5, 9), (5, 8), (6, 6)])), "one_sequence")


def _run(rows, algo, mode, reference_seed=9):
    model = build_tiny_model(16, 0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=4, micro_batch_size=4, update_epochs=2, grad_clip=None,
                       reuse_pi_old=False, pack_rows=mode)
    reference = FrozenReference(build_tiny_model(16, seed=reference_seed), 0.7, pack_rows=mode)
    return model, train_on_batch(model, opt, sched, rows, algo, s, DistInfo(), reference)


@pytest.mark.parametrize("mode", ["one_sequence", "smallest_square"])
def test_an_update_with_packed_rows_equals_the_padded_update(mode, monkeypatch):
    """Two mini-batches x two epochs of SGD steps with pi_old, a KL reference, an entropy bonus and
    TIS: the same metrics and weights (fp32); every forward of the packed update is packed."""
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2, use_kl_loss=True, kl_loss_coef=0.5,
                           entropy_coef=0.01, use_tis=True, tis_imp_ratio_cap=2.0)
    shapes = [(3, 12), (3, 2), (4, 9), (2, 1), (5, 6), (3, 3), (6, 10), (2, 2)]  # rows of 15, 5, 13, 3 | 11, 6, 16, 4
    rows = [replace(r, prompt_ids=r.prompt_ids % 16, response_ids=r.response_ids % 16, advantage=a,
                    rollout_logprobs=torch.full_like(r.loss_mask, -1.5, dtype=torch.float32))
            for r, a in zip(_rows(shapes, seed=4), [0.5, -0.5, 1.0, -1.0, 0.7, -0.2, 0.0, -0.5])]
    assert packs_rows(collate(rows[:4]), mode) and packs_rows(collate(rows[4:]), mode)
    padded_model, padded = _run(rows, algo, "off")
    calls = []
    monkeypatch.setattr(update, "packed_forward", lambda *a: calls.append(a[-1]) or packed_forward(*a))
    packed_model, packed = _run(rows, algo, mode)
    assert calls == [mode] * 8  # pi_old and pi_ref of 2 mini-batches, 2 epochs x 2 training forwards
    assert set(packed) == set(padded)
    for key, value in padded.items():
        assert packed[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    assert padded["grad_norm"] > 0 and padded["policy/kl_ref_mean"] > 0
    for a, b in zip(padded_model.parameters(), packed_model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_auto_packs_a_decoder_whose_attention_keeps_rows_apart():
    model = build_tiny_model(VOCAB)
    assert model.config._attn_implementation == "sdpa" and packing_refusal(model) is None
    mode, words = pack_choice(model, "auto", 4)
    assert mode == "smallest_square" and "sdpa attention" in words
    model.config._attn_implementation = "flash_attention_2"  # a kernel that skips across sequences: one sequence
    assert pack_choice(model, "auto", 4)[0] == "one_sequence"
    assert pack_choice(model, "auto", 1) == ("off", "off (model.pack_rows: auto): loop.micro_batch_size 1 forwards "
                                                     "one row at a time, no padding")
    assert pack_choice(model, False, 4)[0] == "off"


def test_auto_leaves_off_and_true_refuses_a_model_that_cannot_pack():
    model = build_tiny_model(VOCAB)
    model.config._attn_implementation = "my_kernel"  # a custom attention: its mask ignores packed positions
    mode, words = pack_choice(model, "auto", 4)
    assert mode == "off" and "attention implementation 'my_kernel' does not read packed position_ids" in words
    with pytest.raises(ConfigError, match="model.pack_rows: true.*'my_kernel'.*set model.pack_rows: auto or false"):
        pack_choice(model, True, 4)
    mode, words = pack_choice(torch.nn.Linear(2, 2), "auto", 4)
    assert mode == "off" and "Linear is not a transformers model" in words


@pytest.mark.parametrize("overrides,words", [
    ([], "packed without padding between rows"),
    (["loop.micro_batch_size=1"], "loop.micro_batch_size 1; model.pack_rows: auto packs nothing"),
    (["model.pack_rows=false"], "padded to each micro-batch's longest row (model.pack_rows: false)"),
])
def test_the_dry_run_plan_says_how_the_update_lays_out_its_rows(overrides, words):
    from pathlib import Path

    from swerl.trainer.config import load_train_config
    from swerl.trainer.setup.plan import make_plan

    demo = Path(__file__).resolve().parents[3] / "examples" / "humaneval-smollm2-cpu.yaml"  # micro-batches of 4
    line = dict(make_plan(load_train_config(demo, overrides), num_tasks=12).placement)["update rows"]
    assert words in line
