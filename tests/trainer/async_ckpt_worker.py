"""Worker of ``persistence/test_background.py``, launched by ``torchrun --nproc_per_node 2``: an
FSDP2 policy on a gloo CPU mesh starts a background checkpoint after step 1 and trains steps 2-3
while the write runs (the update's collectives and the write's on their own groups); a policy
with other weights loads the committed checkpoint and trains steps 2-3 again. Rank 0 saves what
the test compares."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))  # tiny_llama

from fsdp_worker import adam_setup, adam_steps  # noqa: E402

from swerl.trainer import distributed  # noqa: E402
from swerl.trainer.persistence import checkpoint as ckpt  # noqa: E402


def main(out: Path) -> None:
    info = distributed.init_distributed("cpu")
    torch.set_num_threads(1)
    model, opt, sched = adam_setup(info, sharded=True)
    adam_steps(model, opt, sched, [1], info, True)
    at_save = ckpt.full_model_state_dict(model)  # rank 0: a gathered copy
    pending = ckpt.start_checkpoint(out / "run", 1, model, opt, sched, {"sampler": {"epoch": 0}}, "seed: 0\n", info,
                                    background=True)
    expected = adam_steps(model, opt, sched, [2, 3], info, True)  # while the write may still run
    pending_names = sorted(p.name for p in (out / "run" / ckpt.CKPT_DIR).iterdir())
    after = ckpt.full_model_state_dict(model)
    pending.finish()
    distributed.barrier()

    model2, opt2, sched2 = adam_setup(info, sharded=True, seed=99)
    ckpt.load_checkpoint(ckpt.resolve_resume(out / "run", "latest"), model2, opt2, sched2, info)
    loaded = ckpt.full_model_state_dict(model2)
    resumed = adam_steps(model2, opt2, sched2, [2, 3], info, True)
    if info.is_main:
        torch.save({"at_save": at_save, "after": after, "loaded": loaded, "expected": expected, "resumed": resumed,
                    "pending_while_training": [n for n in pending_names if n.startswith(".tmp")]}, out / "async.pt")
    distributed.destroy()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
