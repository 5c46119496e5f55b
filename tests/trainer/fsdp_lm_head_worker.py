"""Worker of ``policy/test_fsdp_lm_head.py``, launched by ``torchrun --nproc_per_node 2``: FSDP2 updates
(fp32, bf16 mixed precision, LoRA) with the sequence-chunked LM head (``lm_head_chunk_tokens=3``) on a
gloo CPU mesh, and fp32 with packed rows (``pack_rows=one_sequence``) through the chunked head and the
model's own; rank 0 saves the weights, the metrics and how many forwards went through the chunked head
and how many were packed.
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
from swerl.trainer.step import lm_head, update  # noqa: E402

CHUNK = 3
CASES = {"fp32": {}, "bf16": {"bf16": True}, "lora": {"lora": True}, "packed": {"pack_rows": "one_sequence"},
         "packed_own_head": {"pack_rows": "one_sequence", "lm_head_chunk_tokens": 0}}


class CountCalls:
    """Counts the calls of ``module.name`` (``lm_head.chunked_head_logprobs``: the forwards through the
    chunked head; ``update.packed_forward``: the packed ones)."""

    def __init__(self, module, name: str) -> None:  # noqa: ANN001 - a module
        self.calls = 0
        self._where = (module, name)
        self._original = getattr(module, name)

    def __enter__(self) -> "CountCalls":
        def counted(*args, **kwargs):
            self.calls += 1
            return self._original(*args, **kwargs)

        setattr(*self._where, counted)
        return self

    def __exit__(self, *exc) -> None:
        setattr(*self._where, self._original)


def main(out: Path) -> None:
    info = distributed.init_distributed("cpu")
    torch.set_num_threads(1)
    results = {}
    for name, options in CASES.items():
        with CountCalls(lm_head, "chunked_head_logprobs") as chunked, CountCalls(update, "packed_forward") as packed:
            state, metrics = W.sgd_update("token_mean", info, sharded=True, **{"lm_head_chunk_tokens": CHUNK, **options})
        results[name] = (state, {**metrics, "chunked_forwards": chunked.calls, "packed_forwards": packed.calls})
    if info.is_main:
        torch.save({k: v[0] for k, v in results.items()}, out / "weights.pt")
        (out / "metrics.json").write_text(json.dumps({k: v[1] for k, v in results.items()}))
    distributed.destroy()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
