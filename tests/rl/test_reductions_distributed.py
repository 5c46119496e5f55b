"""Two real gloo ranks with DDP equal one rank over the union, for every reduction and every rollout
correction with the KL term on, once the framework's gradient averaging is cancelled
(docs/algorithms.md, Loss reductions, swerl: no extra 1/W)."""

import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from swerl.rl.config import AlgorithmConfig
from swerl.rl.loss import compute_policy_loss
from swerl.rl.reductions import StepDenominators, denominator_parts, dp_loss_scale

from ._tiny import CORRECTION_CASES, correction_config, ragged_batch, tiny_model, token_logprobs

MODES = ["token_mean", "sequence_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum_norm_global"]
WORLD = 2
RANK_ROWS = {0: [[0, 1], [2, 5]], 1: [[3, 4, 6], [7]]}  # unequal rows and lengths per rank


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _backward_step(model, batch, config, micro_batches, world_size, scale):
    """Micro-batch losses against all-reduced step denominators; returns (summed loss, grads)."""
    model.zero_grad(set_to_none=True)
    parts = [batch.rows(idx) for idx in micro_batches]
    local = sum((denominator_parts(mb.loss_mask, mb.advantages) for mb in parts), StepDenominators.zero())
    t = local.as_tensor()
    if world_size > 1:
        dist.all_reduce(t)
    denominators = StepDenominators.from_tensor(t)
    total = torch.zeros((), dtype=torch.float64)
    for mb in parts:
        loss = compute_policy_loss(config, mb.loss_inputs(token_logprobs(model, mb.input_ids)), denominators).loss
        (loss * scale).backward()
        total += loss.detach().double()
    if world_size > 1:
        dist.all_reduce(total)
    module = model.module if hasattr(model, "module") else model
    return float(total), torch.cat([p.grad.flatten().clone() for p in module.parameters()])


def _worker(rank, port, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        base = tiny_model()
        batch = ragged_batch(base)
        ddp = torch.nn.parallel.DistributedDataParallel(tiny_model())  # averages grads over ranks
        results = {}
        configs = {mode: AlgorithmConfig(loss_reduction=mode, max_seq_len=32) for mode in MODES}
        configs.update({f"{c}+kl-{e}": correction_config(m, c, e, 32) for c, m, e in CORRECTION_CASES})
        for mode, config in configs.items():
            union = _backward_step(base, batch, config, [list(range(8))], 1, 1.0)
            cancelled = _backward_step(ddp, batch, config, RANK_ROWS[rank], WORLD, dp_loss_scale(WORLD))
            averaged = _backward_step(ddp, batch, config, RANK_ROWS[rank], WORLD, 1.0)
            results[mode] = (union, cancelled, averaged)
        torch.save(results, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", MODES + [f"{c}+kl-{e}" for c, _, e in CORRECTION_CASES])
def test_two_gloo_ranks_equal_one_rank_over_the_union(rank_results, mode):
    for results in rank_results:
        (u_loss, u_grad), (c_loss, c_grad), (a_loss, a_grad) = results[mode]
        assert u_grad.abs().sum() > 0
        assert c_loss == pytest.approx(u_loss, rel=1e-5)
        assert torch.allclose(c_grad, u_grad, rtol=1e-4, atol=1e-7), float((c_grad - u_grad).abs().max())
        # without the world-size cancellation DDP's averaging leaves an extra 1/W
        assert torch.allclose(a_grad, u_grad / WORLD, rtol=1e-4, atol=1e-7)
        assert not torch.allclose(a_grad, u_grad, rtol=1e-2)
