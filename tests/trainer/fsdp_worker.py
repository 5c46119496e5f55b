"""Worker of ``policy/test_fsdp.py``, launched once by ``torchrun --nproc_per_node 2``: every FSDP2 case
(four reductions, gradient checkpointing + CPU offload, bf16 mixed precision, sequence MIS with
a KL term to a sharded and offloaded reference, sharded checkpoints, LoRA adapters in fp32 and
bf16 with gradient checkpointing) on the tiny model over a gloo CPU mesh; rank 0 saves what the
test compares.

The same functions run unsharded in the test process: that is the 1-rank reference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))  # tiny_llama

from _support import build_tiny_model, make_trajectories  # noqa: E402
from dp_worker import KL_CASE, algorithm  # noqa: E402

from swerl.rl.advantages import group_index  # noqa: E402
from swerl.rl.loss import compute_advantages  # noqa: E402
from swerl.trainer.persistence import checkpoint as ckpt  # noqa: E402
from swerl.trainer.persistence import hf_export  # noqa: E402
from swerl.trainer import distributed  # noqa: E402
from swerl.trainer.step.batch import row_from_trajectory  # noqa: E402
from swerl.trainer.config import LoraConfig, ModelConfig, OptimizerConfig  # noqa: E402
from swerl.trainer.policy.fsdp import shard_model  # noqa: E402
from swerl.trainer.policy.model import prepare_policy  # noqa: E402
from swerl.trainer.step.optim import build_optimizer  # noqa: E402
from swerl.trainer.step.reference import FrozenReference  # noqa: E402
from swerl.trainer.step.update import UpdateSettings, train_on_batch  # noqa: E402

REDUCTIONS = ["token_mean", "sequence_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum_norm_global"]
OPT = OptimizerConfig(lr=1e-2, schedule="cosine", warmup_steps=2, grad_clip=0.5)


def rows(reduction: str, seed: int = 7):
    """9 rows in 3 groups of 3 (unequal lengths, observation spans, A = 0 rows)."""
    algo = algorithm(reduction)
    trajs = make_trajectories(num_groups=3, group_size=3, seed=seed)
    for i in (0, 3, 6):
        trajs[i] = trajs[i].model_copy(update={"reward": 1.0})
        trajs[i + 1] = trajs[i + 1].model_copy(update={"reward": 0.0})
    rewards = torch.tensor([t.reward for t in trajs])
    adv, _ = compute_advantages(algo, rewards, group_index([t.group_id for t in trajs]), None)
    return [row_from_trajectory(t, float(a)) for t, a in zip(trajs, adv)], algo


def model_for(info: distributed.DistInfo, *, sharded: bool, bf16: bool = False, checkpointing: bool = False,
              offload: bool = False, seed: int = 0) -> torch.nn.Module:
    model = build_tiny_model(16, seed=seed)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if sharded:
        shard_model(model, info, bf16=bf16, cpu_offload=offload)
    return model


class CountReduceScatters:
    """Counts FSDP2's gradient reduce-scatters (``torch.distributed.reduce_scatter_single``)."""

    def __init__(self) -> None:
        self.calls = 0
        self._original = torch.distributed.reduce_scatter_single

    def __enter__(self) -> "CountReduceScatters":
        def counted(*args, **kwargs):
            self.calls += 1
            return self._original(*args, **kwargs)

        torch.distributed.reduce_scatter_single = counted
        return self

    def __exit__(self, *exc) -> None:
        torch.distributed.reduce_scatter_single = self._original


LORA = LoraConfig(rank=4, alpha=8.0)


def lora_model_for(info: distributed.DistInfo, *, sharded: bool, bf16: bool = False, checkpointing: bool = False,
                   seed: int = 0) -> torch.nn.Module:
    """The tiny model with LoRA adapters through the trainer's own ``prepare_policy`` (bf16: the base in
    bf16), A drawn from ``seed`` and B non-zero (drawn from ``seed`` too: every adapter weight then gets
    a gradient), then sharded as ``prepare_policy`` would."""
    cfg = ModelConfig(device="cpu", dtype="bfloat16" if bf16 else "float32", gradient_checkpointing=checkpointing,
                      lora=LORA)
    torch.manual_seed(seed)
    model = prepare_policy(build_tiny_model(16, seed=0), cfg, info)
    draw = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=draw) * 0.1)
    if sharded:
        shard_model(model, info, bf16=bf16)
    return model


def adapter_state(model: torch.nn.Module) -> dict:
    """The full trained (adapter) tensors, on rank 0, peft names."""
    return {k: v.clone() for k, v in ckpt.full_model_state_dict(model).items() if "lora_" in k}


def sgd_update(reduction: str, info: distributed.DistInfo, *, sharded: bool, bf16: bool = False,
               checkpointing: bool = False, offload: bool = False, every_micro_batch: bool = False,
               lora: bool = False, lm_head_chunk_tokens: int | None = None, pack_rows: str = "off") -> tuple[dict, dict]:
    """Two optimizer steps (2 update epochs) of SGD lr=1: weight changes are the gradients
    (``lm_head_chunk_tokens``: the update's LM head chunking; None = auto, off at this size;
    ``pack_rows``: the forwards' row layout, ``UpdateSettings.pack_rows``).

    Returns: (full state dict on rank 0 (LoRA: the adapters only), metrics + ``reduce_scatters``:
        FSDP's gradient reduce-scatters (full fine-tuning)).
    """
    batch, algo = rows(reduction)
    if lora:
        model = lora_model_for(info, sharded=sharded, bf16=bf16, checkpointing=checkpointing)
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        s = UpdateSettings(temperature=0.7, rows_per_mini_batch=9, micro_batch_size=2, update_epochs=2,
                           grad_clip=None, compute_dtype=torch.bfloat16 if bf16 else None, sharded=sharded,
                           lm_head_chunk_tokens=lm_head_chunk_tokens, pack_rows=pack_rows)
        metrics = train_on_batch(model, opt, sched, batch, algo, s, info)
        return adapter_state(model), metrics
    model = model_for(info, sharded=sharded, bf16=bf16, checkpointing=checkpointing, offload=offload)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=9, micro_batch_size=2, update_epochs=2, grad_clip=None,
                       compute_dtype=torch.bfloat16 if bf16 else None, sharded=sharded,
                       sync_grads_every_micro_batch=every_micro_batch, lm_head_chunk_tokens=lm_head_chunk_tokens,
                       pack_rows=pack_rows)
    reference = None
    if algo.use_kl_loss:  # the reference is placed like the policy: sharded, offloaded with it
        reference = FrozenReference(model_for(info, sharded=sharded, offload=offload, seed=5), 0.7, device=info.device)
    with CountReduceScatters() as counter:
        metrics = train_on_batch(model, opt, sched, batch, algo, s, info, reference)
    state = {k: v.clone() for k, v in ckpt.full_model_state_dict(model).items()}
    return state, {**metrics, "reduce_scatters": counter.calls}


def adam_steps(model, opt, sched, seeds, info, sharded: bool) -> list[dict]:
    """One AdamW training step per batch seed (2 mini-batches each, grad clip, cosine schedule)."""
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=3, micro_batch_size=2, sharded=sharded)
    out = []
    for seed in seeds:
        batch, algo = rows("seq_mean_token_sum_norm_global", seed)
        out.append(train_on_batch(model, opt, sched, batch, algo, s, info))
    return out


def adam_setup(info, *, sharded: bool, seed: int = 0, lora: bool = False):
    model = (lora_model_for(info, sharded=sharded, seed=seed) if lora else model_for(info, sharded=sharded, seed=seed))
    opt, sched = build_optimizer(model, OPT, total_optimizer_steps=20)
    return model, opt, sched


def lora_checkpoint_case(out: Path, info: distributed.DistInfo) -> None:
    """LoRA: save the adapters and their AdamW state at 2 ranks after step 1, continue 2 steps; a
    policy with other adapters (seed 99) loads the checkpoint at 2 ranks and continues."""
    model, opt, sched = adam_setup(info, sharded=True, lora=True)
    adam_steps(model, opt, sched, [1], info, True)
    ckpt.save_checkpoint(out / "run_lora", 1, model, opt, sched, {"sampler": {"epoch": 0}}, "seed: 0\n", info)
    expected = adam_steps(model, opt, sched, [2, 3], info, True)
    expected_state = adapter_state(model)
    model2, opt2, sched2 = adam_setup(info, sharded=True, seed=99, lora=True)
    ckpt.load_checkpoint(ckpt.resolve_resume(out / "run_lora", "latest"), model2, opt2, sched2, info)
    got = adam_steps(model2, opt2, sched2, [2, 3], info, True)
    got_state = adapter_state(model2)
    hf_export.export_hf(out / "run_lora", 3, model2, None, info, merged=True, max_shard_bytes=20_000)  # gathered shards
    if info.is_main:
        torch.save({"expected": (expected, expected_state), "2to2": (got, got_state)}, out / "ckpt_lora.pt")


def checkpoint_cases(out: Path, info: distributed.DistInfo) -> None:
    """Save at 2 ranks after step 1, continue 2 steps; reload at 2 ranks (2 -> 2) and continue;
    load the 1-rank checkpoint the test wrote (1 -> 2) and continue."""
    model, opt, sched = adam_setup(info, sharded=True)
    adam_steps(model, opt, sched, [1], info, True)
    ckpt.save_checkpoint(out / "run2", 1, model, opt, sched, {"sampler": {"epoch": 0}}, "seed: 0\n", info)
    torch.rand(3)  # RNG consumed after the save must be restored by the load
    expected = adam_steps(model, opt, sched, [2, 3], info, True)
    expected_state = ckpt.full_model_state_dict(model)

    model2, opt2, sched2 = adam_setup(info, sharded=True, seed=99)
    ckpt.load_checkpoint(ckpt.resolve_resume(out / "run2", "latest"), model2, opt2, sched2, info)
    got = adam_steps(model2, opt2, sched2, [2, 3], info, True)
    got_state = ckpt.full_model_state_dict(model2)

    model3, opt3, sched3 = adam_setup(info, sharded=True, seed=98)
    ckpt.load_checkpoint(ckpt.resolve_resume(out / "run1", "latest"), model3, opt3, sched3, info)
    from_one = adam_steps(model3, opt3, sched3, [2, 3], info, True)
    from_one_state = ckpt.full_model_state_dict(model3)
    hf_export.export_hf(out / "run2", 3, model2, None, info, max_shard_bytes=20_000)  # several streamed shards
    hf_export.export_hf(out / "run2", 4, model2, None, info, max_shard_bytes=20_000, dtype=torch.bfloat16)
    streamed = [(name, None if t is None else t.dtype) for name, t in
                hf_export.iter_full_state(model2, torch.bfloat16, keep=info.is_main)]
    every_stream = [None] * info.world_size
    torch.distributed.all_gather_object(every_stream, streamed)
    if info.is_main:
        torch.save({"expected": (expected, expected_state), "2to2": (got, got_state),
                    "1to2": (from_one, from_one_state), "streams": every_stream}, out / "ckpt.pt")


def load_cases(out: Path, info: distributed.DistInfo) -> None:
    """``load_policy`` on 2 ranks, FSDP (untied and tied embeddings) and replicated, with and without
    LoRA, and ``load_reference`` (FSDP, offloaded): the weights file is read by rank 0 only; every
    rank ends with rank 0's values (buffers and adapters included)."""
    from transformers import AutoModelForCausalLM

    from swerl.trainer.config import ModelConfig
    from swerl.trainer.policy.model import load_policy
    from swerl.trainer.step.reference import load_reference

    original, reads = AutoModelForCausalLM.from_pretrained, []

    def counting(*args, **kwargs):
        reads.append(str(args[0]))
        return original(*args, **kwargs)

    AutoModelForCausalLM.from_pretrained = counting
    results = {}
    ids = torch.tensor([[6, 7, 8, 9, 10, 11]])
    try:
        for name, folder, fsdp, lora in (("fsdp", "model", True, None), ("fsdp_tied", "model_tied", True, None),
                                         ("replicated", "model", False, None), ("fsdp_lora", "model", True, LORA),
                                         ("replicated_lora", "model", False, LORA), ("reference", "model", True, None)):
            reads.clear()
            torch.manual_seed(100 + info.rank)  # adapters drawn apart: only rank 0's may survive the load
            if name == "reference":  # the KL term's reference: same load path, sharded and offloaded
                cfg = ModelConfig(path=str(out / folder), device="cpu", fsdp=True, reference_cpu_offload=True)
                model = load_reference(cfg, out / folder, info, 1.0, None).module
            else:
                model, _, _ = load_policy(ModelConfig(path=str(out / folder), device="cpu", fsdp=fsdp, lora=lora), info)
            with torch.no_grad():
                logits = model(ids).logits
            hf = model.get_base_model() if lora is not None else model
            tied = hf.lm_head.weight is hf.model.embed_tokens.weight
            local = {"reads": len(reads), "logits": logits, "tied": tied,
                     "frozen": not any(p.requires_grad for p in model.parameters()),
                     "buffers": {k: v.clone() for k, v in model.named_buffers()},
                     "state": None if fsdp else {k: v.clone() for k, v in model.state_dict().items()}}
            full = ckpt.full_model_state_dict(model) if fsdp else None
            every = [None] * info.world_size
            torch.distributed.all_gather_object(every, local)
            results[name] = {"ranks": every, "full": full}
    finally:
        AutoModelForCausalLM.from_pretrained = original
    if info.is_main:
        torch.save(results, out / "load.pt")


class SilentOnOneRank:
    """An HF engine over an unsharded replica of the policy whose samples on rank ``silent`` come
    back without a token (``empty``) or fail (``fail``): what a vLLM engine may do to the probe."""

    def __init__(self, inner, mode: str | None) -> None:
        self.inner, self.mode, self.tokenizer = inner, mode, inner.tokenizer

    def generate(self, prompts, sampling):
        from swerl.errors import InferenceError

        if self.mode == "fail":
            raise InferenceError("server answered 500")
        out = self.inner.generate(prompts, sampling)
        return [g.model_copy(update={"token_ids": [], "logprobs": []}) for g in out] if self.mode == "empty" else out


def probe_cases(out: Path, info: distributed.DistInfo) -> None:
    """The parity probe of an FSDP policy when rank 1's engine returns nothing, then when it
    fails: no rank hangs in the re-scoring forwards (collectives); every rank gets the outcome."""
    from _support import build_tiny_tokenizer

    from swerl.errors import InferenceError
    from swerl.inference.backends.hf import HFBackend
    from swerl.trainer.config import TrainConfig
    from swerl.inference.weight_sync.module_share import ModuleShare
    from swerl.trainer.rollouts.generator import Generator, probe_parity

    config = TrainConfig.model_validate({"data": {"tasks": "unused"}, "model": {"fsdp": True, "device": "cpu"},
                                         "generator": {"backend": "vllm", "max_model_len": 32768, "probe_tokens": 6}})
    model = model_for(info, sharded=True)
    replica = HFBackend(build_tiny_model(16, seed=0).eval(), build_tiny_tokenizer(), seed=1)
    outcomes = {}
    for mode in ("empty", "fail"):
        backend = SilentOnOneRank(replica, mode if info.rank == 1 else None)
        try:
            outcomes[mode] = probe_parity(Generator(backend, ModuleShare(backend)), model, config, info)
        except InferenceError as err:
            outcomes[mode] = f"InferenceError: {err}"
    every = [None] * info.world_size
    torch.distributed.all_gather_object(every, outcomes)
    if info.is_main:
        (out / "probe.json").write_text(json.dumps(every))


def main(out: Path) -> None:
    info = distributed.init_distributed("cpu")
    torch.set_num_threads(1)
    results = {}
    for reduction in REDUCTIONS:
        results[reduction] = sgd_update(reduction, info, sharded=True)
    results["checkpointing+offload"] = sgd_update("token_mean", info, sharded=True, checkpointing=True, offload=True)
    results["bf16"] = sgd_update("seq_mean_token_sum_norm_global", info, sharded=True, bf16=True)
    results[KL_CASE] = sgd_update(KL_CASE, info, sharded=True, offload=True)
    results["every_micro_batch"] = sgd_update("seq_mean_token_sum_norm_global", info, sharded=True,
                                              every_micro_batch=True)
    results["lora"] = sgd_update("token_mean", info, sharded=True, lora=True)
    results["lora+bf16+checkpointing"] = sgd_update("seq_mean_token_sum_norm_global", info, sharded=True, bf16=True,
                                                    checkpointing=True, lora=True)
    if info.is_main:
        torch.save({k: v[0] for k, v in results.items()}, out / "weights.pt")
        (out / "metrics.json").write_text(json.dumps({k: v[1] for k, v in results.items()}))
    checkpoint_cases(out, info)
    load_cases(out, info)
    probe_cases(out, info)
    lora_checkpoint_case(out, info)
    distributed.destroy()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
