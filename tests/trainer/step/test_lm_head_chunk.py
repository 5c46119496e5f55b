"""The sequence-chunked LM head (``model.lm_head_chunk_tokens``): log-probs, entropies, kept-set masses
and parameter gradients equal the model's own head (float64: to 1e-12; bf16 autocast: at bf16
tolerance), tied or untied, with and without stored kept sets, on a LoRA model; no (n, L-s0, V)
tensor is ever made in the forward or the backward; an update with it equals one without."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from swerl.errors import ConfigError
from swerl.rl.config import AlgorithmConfig
from swerl.rl.lm_head import AUTO_ELEMENTS, chunked_head_logprobs, resolve_chunk_tokens
from swerl.rl.logprobs import next_token_logprobs_on_support
from swerl.rl.support import NO_TOKEN
from swerl.trainer.config import LoraConfig, ModelConfig
from swerl.trainer.distributed import DistInfo
from swerl.trainer.policy.model import prepare_policy
from swerl.trainer.step.batch import MicroBatch
from swerl.trainer.step.lm_head import forward_chunk_tokens, require_chunkable_head
from swerl.trainer.step.update import UpdateSettings, forward_with_mass, train_on_batch

from .._support import build_tiny_model, make_trajectories
from .test_update import rows_of

VOCAB, LENGTH, CHUNK = 97, 23, 4  # CHUNK does not divide the 23 - 5 - 1 = 17 positions after s0 = 5


def _micro_batch(support: bool, replay: bool = False, seed: int = 0) -> MicroBatch:
    """2 rows of LENGTH ids (the second right-padded by 3), first response columns 5 and 7; with
    ``support``: a kept set of 6 ids (the target among them) at every other position, none elsewhere."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (2, LENGTH), generator=g)
    attention = torch.ones(2, LENGTH, dtype=torch.int64)
    attention[1, -3:] = 0
    ids[1, -3:] = 0
    kept = None
    if support:
        kept = torch.randint(1, VOCAB, (2, LENGTH - 1, 6), generator=g)
        kept[..., 0] = ids[:, 1:]
        kept[:, ::2] = NO_TOKEN
    zeros = torch.zeros(2, LENGTH - 1)
    return MicroBatch(input_ids=ids, attention_mask=attention, loss_mask=zeros.bool(), advantages=zeros,
                      rollout_logprobs=zeros, has_rollout_logprobs=torch.ones(2, dtype=torch.bool), old_logprobs=None,
                      response_starts=torch.tensor([5, 7]), response_lengths=torch.tensor([17, 12]), support=kept,
                      replay_support=replay)


def _values_and_grads(model, mb, chunk, dtype=None, with_entropy=True):
    """forward_with_mass's outputs and the gradients of a loss that weighs every log-prob and entropy."""
    model.zero_grad(set_to_none=True)
    lp, ent, mass = forward_with_mass(model, mb, 0.7, with_entropy, dtype, lm_head_chunk_tokens=chunk)
    g = torch.Generator().manual_seed(1)
    weights = torch.randn(lp.shape, generator=g, dtype=torch.float64)
    loss = (lp.double() * weights).sum() + ((ent.double() * weights.flip(-1)).sum() if ent is not None else 0)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), (None if ent is None else ent.detach()), mass, grads


def _assert_same(plain, chunked, rtol, atol):
    for a, b in zip(plain[:3], chunked[:3]):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(b, a, rtol=rtol, atol=atol)
    assert set(plain[3]) == set(chunked[3]) and plain[3]
    for name, grad in plain[3].items():
        assert grad.abs().max() > 0, name
        torch.testing.assert_close(chunked[3][name], grad, rtol=rtol, atol=atol * 10, msg=name)


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("support,replay", [(False, False), (True, False), (True, True)])
def test_chunked_head_equals_the_models_head_in_float64(tied, support, replay):
    model = build_tiny_model(VOCAB, seed=2, tie_word_embeddings=tied).double()
    mb = _micro_batch(support, replay)
    plain = _values_and_grads(model, mb, 0)
    chunked = _values_and_grads(model, mb, CHUNK)
    assert plain[0][:, :5].eq(0).all() and plain[0][:, 5:].ne(0).all()  # columns before s0 = 5 are not computed
    if support:
        assert plain[2][:, 5::2].lt(0).all() and plain[2][:, ::2].eq(0).all()
    _assert_same(plain, chunked, rtol=1e-12, atol=1e-12)


def test_chunked_head_under_bf16_autocast_is_close_to_the_models_head():
    model = build_tiny_model(VOCAB, seed=2)
    mb = _micro_batch(True, replay=True)
    plain = _values_and_grads(model, mb, 0, torch.bfloat16)
    chunked = _values_and_grads(model, mb, CHUNK, torch.bfloat16)
    exact = _values_and_grads(model, mb, 0)
    assert not torch.allclose(plain[0], exact[0], rtol=1e-4, atol=1e-4)  # the head really ran in bf16
    torch.testing.assert_close(chunked[0], plain[0], rtol=1e-5, atol=1e-5)  # same bf16 logits, same float32 math
    _assert_same(plain, chunked, rtol=2e-2, atol=2e-3)


def test_chunked_head_on_a_lora_model_gives_the_adapters_the_same_gradients():
    cfg = ModelConfig(device="cpu", lora=LoraConfig(rank=4, alpha=8.0))
    torch.manual_seed(0)
    model = prepare_policy(build_tiny_model(VOCAB, seed=2), cfg, DistInfo()).double()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    mb = _micro_batch(True)
    plain, chunked = _values_and_grads(model, mb, 0), _values_and_grads(model, mb, CHUNK)
    assert plain[3] and all("lora_" in name for name in plain[3])
    _assert_same(plain, chunked, rtol=1e-12, atol=1e-12)


class _LargestVocabTensor(TorchDispatchMode):
    """Records the most elements of any tensor an op makes whose last dimension is V (logits-like)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == VOCAB and t.shape[-2] != 32:
                self.largest = max(self.largest, t.numel())  # (H=32, V) is the weight's transpose
        return out


@pytest.mark.parametrize("chunk", [0, CHUNK])
def test_no_full_logits_tensor_is_made_in_forward_or_backward(chunk):
    model = build_tiny_model(VOCAB, seed=2)
    mb = _micro_batch(True, replay=True)
    with _LargestVocabTensor() as seen:
        lp, ent, _ = forward_with_mass(model, mb, 0.7, True, lm_head_chunk_tokens=chunk)
        (lp.sum() + ent.sum()).backward()
    full = 2 * (LENGTH - 5) * VOCAB  # n x (L - s0) x V
    if chunk:
        assert seen.largest <= CHUNK * VOCAB
    else:
        assert seen.largest >= full


def test_auto_chunks_only_large_forwards():
    assert resolve_chunk_tokens(None, 1, 100, 151_936) == 0
    assert resolve_chunk_tokens(None, 1, AUTO_ELEMENTS // 151_936 + 1, 151_936) == 880  # 4 x 128 MiB float32 chunks
    assert resolve_chunk_tokens(0, 8, 32_768, 151_936) == 0 and resolve_chunk_tokens(7, 1, 2, 3) == 7
    model = build_tiny_model(VOCAB)
    assert forward_chunk_tokens(model, None, 1, 100) == 0
    assert forward_chunk_tokens(model, None, 1, AUTO_ELEMENTS // VOCAB + 1) > 0


class _ScaledHeadLlama(torch.nn.Module):
    """A causal LM whose forward rescales its head's output (as a logit scale or soft-capping does)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = build_tiny_model(VOCAB)

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def set_output_embeddings(self, head):
        self.inner.set_output_embeddings(head)

    def forward(self, **kwargs):
        out = self.inner(**kwargs)
        out.logits = out.logits * 2.0
        return out


def test_a_model_that_changes_its_heads_output_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"^model\.lm_head_chunk_tokens: .*set model\.lm_head_chunk_tokens: 0$"):
        forward_with_mass(_ScaledHeadLlama(), _micro_batch(False), 0.7, lm_head_chunk_tokens=CHUNK)
    forward_with_mass(_ScaledHeadLlama(), _micro_batch(False), 0.7)  # auto: its own head


def test_a_head_that_is_not_a_plain_linear_is_refused_before_the_first_step_unless_auto():
    model = build_tiny_model(VOCAB)
    model.lm_head = torch.nn.Sequential(model.lm_head)
    with pytest.raises(ConfigError, match=r"^model\.lm_head_chunk_tokens needs a plain nn\.Linear .*: 0$"):
        require_chunkable_head(model, CHUNK)
    require_chunkable_head(model, None)
    assert forward_chunk_tokens(model, None, 1, AUTO_ELEMENTS) == 0
    capped = build_tiny_model(VOCAB)
    capped.config.final_logit_softcapping = 30.0  # as Gemma-2's config: auto keeps its own head
    assert forward_chunk_tokens(capped, None, 1, AUTO_ELEMENTS) == 0


def test_an_update_with_the_chunked_head_equals_one_without():
    algo = AlgorithmConfig(n_samples_per_prompt=4, min_group_size=2, entropy_coef=0.01, max_seq_len=32)
    trajs = make_trajectories(num_groups=2, group_size=4, seed=1)
    trajs[0] = trajs[0].model_copy(update={"reward": 1.0})
    rows = rows_of(trajs, algo)
    base = build_tiny_model(16, seed=0).double()
    out = []
    for chunk in (0, 3):
        model = copy.deepcopy(base)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        s = UpdateSettings(temperature=0.7, rows_per_mini_batch=4, micro_batch_size=2, update_epochs=2, grad_clip=None,
                           lm_head_chunk_tokens=chunk)
        out.append((model, train_on_batch(model, opt, sched, rows, algo, s, DistInfo())))
    (plain, m0), (chunked, m1) = out
    assert m0["grad_norm"] > 0 and m1["grad_norm"] == pytest.approx(m0["grad_norm"], rel=1e-10)
    assert m1["loss/policy"] == pytest.approx(m0["loss/policy"], rel=1e-10, abs=1e-12)
    for (name, p0), p1 in zip(plain.named_parameters(), chunked.parameters()):
        torch.testing.assert_close(p1, p0, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("chunk,math", [(7, 3), (5, None), (40, 6)])
def test_chunked_head_logprobs_with_a_bias_and_float32_sub_chunks_equal_the_whole_logits(chunk, math):
    """The pure function, a chunk of 7 positions in float32 sub-chunks of 3 (and the defaults), with a
    head bias: values and the gradients of hidden states, weight and bias equal the whole-logits path."""
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(2, 19, 8, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(VOCAB, 8, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(VOCAB, generator=g, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, VOCAB, (2, 19), generator=g)
    support = torch.randint(0, VOCAB, (2, 18, 5), generator=g)
    support[..., 0] = ids[:, 1:]
    support[:, 1::3] = NO_TOKEN
    outputs = []
    for path in ("whole", "chunked"):
        if path == "whole":
            logits = torch.nn.functional.linear(hidden, weight, bias)
            lp, ent, mass = next_token_logprobs_on_support(logits, ids, support, 0.7, replay=True, with_entropy=True)
        else:
            lp, ent, mass = chunked_head_logprobs(hidden, weight, bias, ids, 0.7, chunk_tokens=chunk,
                                                  compute_dtype=torch.float64, with_entropy=True, support=support,
                                                  replay=True, math_tokens=math)
        grads = torch.autograd.grad((lp * lp.detach()).sum() + ent.sum(), [hidden, weight, bias])
        outputs.append((lp, ent, mass, *grads))
    for whole, chunked in zip(*outputs):
        assert whole.abs().max() > 0
        torch.testing.assert_close(chunked, whole, rtol=1e-12, atol=1e-12)
