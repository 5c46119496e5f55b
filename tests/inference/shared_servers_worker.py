"""Worker of ``test_vllm_engines.py``'s shared-server test, launched by ``torchrun --nproc_per_node 2``
(gloo, CPU) with the URLs of the suite's two vLLM servers: both ranks send requests to both
servers (``server_urls``), and after a step each server is reloaded by its owner rank only, once
every rank has drained its own requests. Rank 1 has a long request in flight on server 0 (owned
by rank 0) when the step publishes. Rank 0 writes OUT/result.json."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as tdist
from transformers import AutoModelForCausalLM, AutoTokenizer

from swerl.inference.backends.base import SamplingParams
from swerl.inference.engines.engine_pool import EnginePool
from swerl.inference.engines.vllm_server import VLLMServerBackend
from swerl.trainer import distributed
from swerl.trainer.rollouts.busy import BusyClock, metered
from swerl.trainer.config import TrainConfig
from swerl.trainer.rollouts.generator import apply_weights, attach_sync


def main(out: Path, model_path: str, urls: list[str]) -> None:
    info = distributed.init_distributed("cpu")
    config = TrainConfig(model={"path": model_path, "device": "cpu"}, data={"tasks": "unused"},
                         agent={"temperature": 0.7, "limits": {"context_window_tokens": 512, "max_new_tokens_per_turn": 64}},
                         generator={"backend": "vllm", "vllm_mode": "servers", "server_urls": urls, "dtype": "bfloat16",
                                    "max_model_len": 1024, "probe_tokens": 8})
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    pool = EnginePool([VLLMServerBackend(url, tokenizer, max_concurrency=8) for url in urls], tokenizer)
    generator = attach_sync(pool, config, model, out / "run", info, owns_backend=False)
    counts = lambda: [int(engine.collective_rpc("swerl_reload_count")[0]) for engine in pool.engines]  # noqa: E731
    before = counts()
    tdist.barrier()
    front = metered(pool, BusyClock())
    long = None
    if info.rank == 1:  # a long turn of rank 1 on server 0 (the least loaded: both idle), owned by rank 0
        long = front.submit([1] * 8, SamplingParams(temperature=0.0, max_new_tokens=96, stop_token_ids=[]))
        time.sleep(0.2)
    staged = generator.sync.stage(model, 1)
    applied = {}
    real_apply = generator.sync.apply
    generator.sync.apply = lambda s: (applied.setdefault("at", time.monotonic()), real_apply(s))[1]
    with front.exclusive():  # rank 1: returns once its long turn is done
        done_at = time.monotonic()
        metrics = apply_weights(generator, staged, model, config, info)
    tdist.barrier()
    after = counts()
    report = {"rank": info.rank, "owned": [e.url for e in generator.sync.probe_engines()], "before": before,
              "after": after, "applied_at": applied.get("at"), "drained_at": done_at, "metrics": metrics,
              "versions": [e.weight_version for e in pool.engines],
              "long_version": long.result().weight_version if long is not None else None}
    reports = [None, None]
    tdist.all_gather_object(reports, report)
    if info.rank == 0:
        (out / "result.json").write_text(json.dumps(reports))
    distributed.destroy()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
