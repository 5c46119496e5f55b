"""Worker of ``policy/test_fsdp_lm_head.py``, launched by ``torchrun --nproc_per_node 2``: FSDP2 updates
(fp32, bf16 mixed precision, LoRA) with the sequence-chunked LM head (``lm_head_chunk_tokens=3``) on a
gloo CPU mesh; rank 0 saves the weights, the metrics and how many forwards went through the chunked head.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))  # tiny_llama

import fsdp_worker as W  # noqa: E402

from swerl.trainer import distributed  # noqa: E402
from swerl.trainer.step import lm_head  # noqa: E402

CHUNK = 3
CASES = {"fp32": {}, "bf16": {"bf16": True}, "lora": {"lora": True}}


class CountChunkedForwards:
    """Counts the forwards that went through the chunked head (``lm_head.chunked_head_logprobs``)."""

    def __init__(self) -> None:
        self.calls = 0
        self._original = lm_head.chunked_head_logprobs

    def __enter__(self) -> "CountChunkedForwards":
        def counted(*args, **kwargs):
            self.calls += 1
            return self._original(*args, **kwargs)

        lm_head.chunked_head_logprobs = counted
        return self

    def __exit__(self, *exc) -> None:
        lm_head.chunked_head_logprobs = self._original


def main(out: Path) -> None:
    info = distributed.init_distributed("cpu")
    torch.set_num_threads(1)
    results = {}
    for name, options in CASES.items():
        with CountChunkedForwards() as counter:
            state, metrics = W.sgd_update("token_mean", info, sharded=True, lm_head_chunk_tokens=CHUNK, **options)
        results[name] = (state, {**metrics, "chunked_forwards": counter.calls})
    if info.is_main:
        torch.save({k: v[0] for k, v in results.items()}, out / "weights.pt")
        (out / "metrics.json").write_text(json.dumps({k: v[1] for k, v in results.items()}))
    distributed.destroy()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
