"""Policy-update throughput of the default model (SmolLM2-135M-Instruct) on CPU, fp32 vs bf16 vs
``auto`` (the dtype ``model.dtype: auto`` resolves to here) vs FSDP2 on 2 gloo ranks vs LoRA (rank 16
on every linear, fp32 or bf16 base), next to this machine's measured matmul peak in each precision.

One update = what the demo's trainer does per step (one mini-batch, one update epoch): the
forward/backward of ``compute_policy_loss`` and an AdamW step (``update.train_on_batch``; pi_old
is that forward's log-probs, detached; ``--separate-pi-old`` adds the separate pi_old forward of
before), on the demo's shapes: rows of 172 prompt + 128 response tokens, 4 rows per micro-batch,
one thread per process. FLOPs per token: 6N + 12*L*d*T (fwd/bwd; attention, PaLM's count), plus
2N + 4*L*d*T with the separate pi_old forward; N = parameters that multiply (the tied LM head
counted once, and only for the response columns it runs on). Prints the machine (CPU, bf16 probe, auto resolution), then one line per figure,
``<mode>: <value> <unit>``; the TIS line checks that bf16 compute leaves the TIS ratio at 1
against the fp32 HF generator (live fp32 module) with unchanged weights.

bf16 modes are skipped (one line saying so) where the measured bf16 matmul peak is below fp32's.
LoRA modes print tokens/s and peak RSS only (their backward skips the frozen weights' gradients,
so the full fine-tuning FLOP count does not apply).
``--ragged`` draws response lengths from 16-128 tokens and ``--micro M`` cuts the rows into
micro-batches of M (the demo: ``--rows 16 --micro 4 --ragged``; tokens/s then counts the rows'
tokens, not padding, and the FLOPs are those of each row's own length);
``--profile`` prints the top 5 torch ops by self CPU time of one more update.
Usage: .venv/bin/python bench/update_throughput.py [--modes fp32,bf16,auto,lora_fp32,lora_bf16] [--steps 2]
[--rows 4] [--micro M] [--ragged] [--profile] [--no-fsdp] [--no-tis] [--force-bf16] [--separate-pi-old]
Run it alone (under the CPU lock on a shared machine): it is a figure, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

PROMPT_TOKENS, RESPONSE_TOKENS = 172, 128


def response_lengths(num_rows: int, ragged: bool, seed: int = 0) -> list[int]:
    """Response tokens per row: all RESPONSE_TOKENS, or with ``ragged`` drawn uniformly from 16 to
    RESPONSE_TOKENS (the demo's answers run 20-128 tokens: most stop early, some are cut at length)."""
    if not ragged:
        return [RESPONSE_TOKENS] * num_rows
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randint(16, RESPONSE_TOKENS + 1, (num_rows,), generator=gen).tolist()


def demo_rows(num_rows: int, vocab: int, seed: int = 0, ragged: bool = False):
    """Rows of the demo's shape: random ids, a trainable response, nonzero advantages, rollout mu."""
    from swerl.trainer.step.batch import Row

    gen = torch.Generator().manual_seed(seed)
    rows = []
    for i, length in enumerate(response_lengths(num_rows, ragged, seed)):
        rows.append(Row(
            prompt_ids=torch.randint(0, vocab, (PROMPT_TOKENS,), generator=gen),
            response_ids=torch.randint(0, vocab, (length,), generator=gen),
            loss_mask=torch.ones(length, dtype=torch.bool),
            rollout_logprobs=torch.full((length,), -2.0),
            advantage=1.0 if i % 2 else -1.0,
        ))
    return rows


def top_ops(step, count: int = 5) -> list[dict]:
    """The ``count`` torch ops with the most self CPU time in one call of ``step()`` (torch.profiler),
    each with its share of the profiled ops' total self time and its call count."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    return [{"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / total,
             "calls": e.count} for e in events[:count]]


def flops_per_token(model: torch.nn.Module, separate_pi_old: bool, response_lengths: list[int] | None = None) -> float:
    """Matmul FLOPs of the update per token (useful tokens: a row's prompt + response, no padding):
    3 passes (fwd, bwd) or 4 with the pi_old forward, summed over the rows and divided by their
    tokens. The LM head (V x d) runs only on the columns from the first response column on
    (``logits_to_keep``: response + 1 of the row's prompt + response), so it counts for that share;
    attention costs 4 * L * d * seq per token and pass. ``response_lengths``: one per row (default
    one row of RESPONSE_TOKENS)."""
    cfg = model.config
    n = sum(p.numel() for name, p in model.named_parameters() if "embed_tokens" not in name or cfg.tie_word_embeddings)
    head = cfg.vocab_size * cfg.hidden_size
    passes = 4 if separate_pi_old else 3
    total = tokens = 0
    for response in response_lengths or [RESPONSE_TOKENS]:
        seq = PROMPT_TOKENS + response
        total += passes * (2 * (n - head) * seq + 2 * head * (response + 1)
                           + 4 * cfg.num_hidden_layers * cfg.hidden_size * seq * seq)
        tokens += seq
    return total / tokens


def worker(mode: str, steps: int, num_rows: int, separate_pi_old: bool, ragged: bool = False,
           profile_ops: bool = False, micro: int | None = None) -> dict:
    from swerl.trainer import distributed
    from swerl.trainer.config import LoraConfig, ModelConfig, load_train_config
    from swerl.trainer.policy.lora import hf_module
    from swerl.trainer.policy.model import compute_dtype, load_policy
    from swerl.trainer.step.optim import build_optimizer
    from swerl.trainer.step.update import UpdateSettings, train_on_batch

    torch.set_num_threads(1)
    cfg = load_train_config(Path(__file__).parent.parent / "examples" / "humaneval-smollm2-cpu.yaml")
    sharded = mode.startswith("fsdp2")
    lora = LoraConfig(rank=16, alpha=32.0) if mode.startswith("lora") else None
    model_cfg = ModelConfig(device="cpu", dtype="bfloat16" if mode.endswith("bf16") else "float32", fsdp=sharded,
                            lora=lora)
    info = distributed.init_distributed("cpu")
    model, tokenizer, _ = load_policy(model_cfg, info)
    optimizer, scheduler = build_optimizer(model, cfg.optimizer, 100)
    settings = UpdateSettings(temperature=cfg.agent.temperature, rows_per_mini_batch=num_rows * info.world_size,
                              micro_batch_size=micro or num_rows, compute_dtype=compute_dtype(model_cfg), sharded=sharded,
                              pad_id=tokenizer.pad_token_id or 0, reuse_pi_old=not separate_pi_old)
    rows = demo_rows(num_rows * info.world_size, model.config.vocab_size, ragged=ragged)
    model.train()
    times = []

    def step() -> None:
        train_on_batch(model, optimizer, scheduler, rows, cfg.algorithm, settings, info)

    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    ops = top_ops(step) if profile_ops else []
    # Tokens that carry the update (prompt + response of every row), not padding: what tokens/s counts.
    out = {"seconds": min(times[1:] or times), "tokens": sum(len(r.prompt_ids) + len(r.response_ids) for r in rows),
           "ops": ops,
           "flops_per_token": flops_per_token(hf_module(model), separate_pi_old, [len(r.response_ids) for r in rows]),
           "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rank": info.rank}
    distributed.destroy()
    return out


def auto_dtype() -> str:
    """``fp32`` or ``bf16``: what ``model.dtype: auto`` resolves to on this machine."""
    from swerl.trainer.setup.auto import machine_choice

    return {"float32": "fp32", "bfloat16": "bf16"}[machine_choice("cpu")[1].dtype]


def tis_check(num_samples: int) -> float:
    """Mean TIS ratio pi_trainer(bf16 autocast) / mu(fp32 HF generator) on sampled demo-like completions."""
    from swerl.inference.backends.base import SamplingParams
    from swerl.inference.backends.hf import HFBackend
    from swerl.trainer.step.batch import Row, collate
    from swerl.trainer.step.update import forward_logprobs

    torch.set_num_threads(1)
    backend = HFBackend.from_pretrained(None, dtype="float32")
    tok = backend.tokenizer
    questions = ["Write a Python function that returns the sum of a list.", "Write a function is_prime(n).",
                 "Write a function that reverses a string.", "Write a function that counts vowels in a string."]
    texts = [tok.apply_chat_template([{"role": "user", "content": questions[i % len(questions)]}], tokenize=False,
                                     add_generation_prompt=True) for i in range(num_samples)]
    prompts = [list(tok.encode(t, add_special_tokens=False)) for t in texts]
    gens = backend.generate(prompts, SamplingParams(temperature=0.7, top_p=1.0, max_new_tokens=RESPONSE_TOKENS))
    ratios = []
    for p, g in zip(prompts, gens):
        row = Row(prompt_ids=torch.tensor(p), response_ids=torch.tensor(g.token_ids),
                  loss_mask=torch.ones(len(g.token_ids), dtype=torch.bool),
                  rollout_logprobs=torch.tensor(g.logprobs, dtype=torch.float32), advantage=1.0)
        mb = collate([row], tok.pad_token_id or 0)
        with torch.no_grad():
            lp, _ = forward_logprobs(backend.model, mb, 0.7, compute_dtype=torch.bfloat16)
        ratios.append((mb.response_values(lp)[0] - row.rollout_logprobs).exp())
    return float(torch.cat(ratios).mean())


def spawn(mode: str, args: argparse.Namespace) -> dict:
    """Run ``mode`` in fresh processes (peak RSS per mode); FSDP2 under torchrun with 2 ranks."""
    me = [str(Path(__file__).resolve()), "--worker", mode, "--steps", str(args.steps), "--rows", str(args.rows),
          *(["--separate-pi-old"] if args.separate_pi_old else []), *(["--ragged"] if args.ragged else []),
          *(["--profile"] if args.profile else []), *(["--micro", str(args.micro)] if args.micro else [])]
    if mode.startswith("fsdp2"):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *me]
    else:
        cmd = [sys.executable, *me]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
    results = [json.loads(ln[len("RESULT "):]) for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    worst = max(results, key=lambda r: r["seconds"])
    return {**worst, "rss_mib": max(r["rss_mib"] for r in results), "ranks": len(results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="updates per mode; the fastest after the first counts")
    parser.add_argument("--rows", type=int, default=4, help="rows per rank (one micro-batch)")
    parser.add_argument("--no-fsdp", action="store_true")
    parser.add_argument("--no-tis", action="store_true")
    parser.add_argument("--tis-samples", type=int, default=4, help="completions sampled for the TIS check")
    parser.add_argument("--force-bf16", action="store_true", help="run bf16 modes even where bf16 matmul is slow")
    parser.add_argument("--modes", default="fp32,bf16,auto,lora_fp32,lora_bf16",
                        help="of fp32, bf16, auto, lora_fp32, lora_bf16 (+ the FSDP2 modes unless --no-fsdp)")
    parser.add_argument("--separate-pi-old", action="store_true", help="also run the separate pi_old forward (as before)")
    parser.add_argument("--ragged", action="store_true",
                        help="response lengths drawn from 16-128 tokens (the demo's spread) instead of all 128")
    parser.add_argument("--micro", type=int, help="rows per micro-batch (default: --rows, one micro-batch)")
    parser.add_argument("--profile", action="store_true", help="print the top 5 ops by self CPU time of one more update")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker, args.steps, args.rows, args.separate_pi_old, args.ragged,
                                            args.profile, args.micro)), flush=True)
        return
    from swerl.trainer.setup.auto import machine_summary

    for line in machine_summary():
        print(line, flush=True)
    torch.set_num_threads(1)
    from swerl.inference.machine import measure

    peak = measure("cpu", budget_s=1.0)  # the probe of auto, longer: 1 s of matmuls per dtype
    peaks = {"fp32": peak.fp32_gflops, "bf16": peak.bf16_gflops}
    print(f"matmul_peak_fp32_1thread: {peaks['fp32']:.0f} GFLOP/s")
    print(f"matmul_peak_bf16_1thread: {peaks['bf16']:.0f} GFLOP/s")
    modes = args.modes.split(",") + ([] if args.no_fsdp else ["fsdp2_2ranks_fp32", "fsdp2_2ranks_bf16"])
    slow_bf16 = peaks["bf16"] < peaks["fp32"] and not args.force_bf16
    speed = {}
    for mode in modes:
        actual = auto_dtype() if mode == "auto" else mode  # the worker's mode
        if actual.endswith("bf16") and slow_bf16:
            print(f"{mode}_update_tokens_per_s: skipped (bf16 matmul {peaks['bf16']:.1f} < fp32 {peaks['fp32']:.0f} "
                  "GFLOP/s: this CPU has no AMX/AVX512-BF16; --force-bf16 runs it)")
            continue
        r = spawn(actual, args)
        tokens_s = r["tokens"] / r["seconds"]
        speed[mode] = speed[actual] = tokens_s  # auto counts as the dtype it resolved to
        gflops = tokens_s * r["flops_per_token"] / 1e9
        peak = peaks["bf16" if actual.endswith("bf16") else "fp32"] * r["ranks"]
        print(f"{mode}_update_tokens_per_s: {tokens_s:.1f} tokens/s" + (f" (= {actual})" if mode == "auto" else ""))
        if not mode.startswith("lora"):
            print(f"{mode}_update_gflops: {gflops:.1f} GFLOP/s ({100 * gflops / peak:.1f}% of {peak:.0f} GFLOP/s "
                  "matmul peak)")
        print(f"{mode}_update_s: {r['seconds']:.2f} s per update of {r['tokens']} tokens")
        print(f"{mode}_peak_rss: {r['rss_mib']:.0f} MiB" + (" per rank" if r["ranks"] > 1 else ""))
        for rank, op in enumerate(r["ops"], 1):
            print(f"{mode}_top_op_{rank}: {op['op']} {op['self_s']:.3f} s self CPU ({100 * op['share']:.1f}% of the "
                  f"update's op time, {op['calls']} calls)")
    if "lora_fp32" in speed and "fp32" in speed:
        print(f"lora_fp32_speedup_over_full_fp32: {speed['lora_fp32'] / speed['fp32']:.2f} x")
    if "bf16" in speed and "fp32" in speed:
        print(f"bf16_speedup_over_fp32: {speed['bf16'] / speed['fp32']:.2f} x")
    elif "fp32" in speed:
        print(f"bf16_speedup_over_fp32: {peaks['bf16'] / peaks['fp32']:.3f} x (matmul peaks; update not run)")
    if not args.no_tis:
        print(f"tis_ratio_mean_bf16_trainer_vs_fp32_hf_generator: {tis_check(args.tis_samples):.4f} ratio "
              f"({args.tis_samples} samples x <= {RESPONSE_TOKENS} tokens, T=0.7, unchanged weights)")


if __name__ == "__main__":
    main()
