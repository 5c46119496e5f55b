"""Worker of ``test_distributed.py``, launched by ``torchrun --nproc_per_node W``: one update of
the tiny model on a fixed batch of synthetic trajectories per case (a loss reduction, or
``KL_CASE``: sequence-level MIS with a KL term to a frozen reference); rank 0 saves the weights
and metrics."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))  # tiny_llama

from _support import build_tiny_model, make_trajectories  # noqa: E402

from swerl.rl.advantages import group_index  # noqa: E402
from swerl.rl.config import AlgorithmConfig  # noqa: E402
from swerl.rl.loss import compute_advantages  # noqa: E402
from swerl.trainer import distributed  # noqa: E402
from swerl.trainer.step.batch import row_from_trajectory  # noqa: E402
from swerl.trainer.step.reference import FrozenReference  # noqa: E402
from swerl.trainer.step.update import UpdateSettings, train_on_batch  # noqa: E402

KL_CASE = "kl+sequence_mask"


def algorithm(case: str) -> AlgorithmConfig:
    """A reduction's config, or KL_CASE: seqnorm-global, sequence MIS [1/20, 20], k3 KL."""
    if case == KL_CASE:
        return AlgorithmConfig(n_samples_per_prompt=3, min_group_size=2, loss_reduction="seq_mean_token_sum_norm_global",
                               max_seq_len=32, use_tis=False, use_kl_loss=True, kl_loss_coef=0.5,
                               rollout_correction={"level": "sequence", "mode": "mask", "high": 20.0})
    return AlgorithmConfig(n_samples_per_prompt=3, min_group_size=2, loss_reduction=case, max_seq_len=32)


def run(out: Path | None, reduction: str) -> tuple[dict, dict]:
    info = distributed.init_distributed("cpu")
    return update(out, reduction, info)


def update(out: Path | None, reduction: str, info: distributed.DistInfo) -> tuple[dict, dict]:
    algo = algorithm(reduction)
    trajs = make_trajectories(num_groups=3, group_size=3, seed=7)
    for i in (0, 3, 6):
        trajs[i] = trajs[i].model_copy(update={"reward": 1.0})
        trajs[i + 1] = trajs[i + 1].model_copy(update={"reward": 0.0})
    rewards = torch.tensor([t.reward for t in trajs])
    adv, _ = compute_advantages(algo, rewards, group_index([t.group_id for t in trajs]), None)
    rows = [row_from_trajectory(t, float(a)) for t, a in zip(trajs, adv)]
    model = build_tiny_model(16, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    s = UpdateSettings(temperature=0.7, rows_per_mini_batch=9, micro_batch_size=2, update_epochs=2, grad_clip=None)
    reference = FrozenReference(build_tiny_model(16, seed=5), 0.7) if algo.use_kl_loss else None
    metrics = train_on_batch(model, opt, sched, rows, algo, s, info, reference)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if out is not None and info.is_main:
        torch.save(state, out / f"weights-{reduction}.pt")
        (out / f"metrics-{reduction}.json").write_text(json.dumps(metrics))
    return state, metrics


def shared_dir_cases(out: Path, info: distributed.DistInfo) -> None:
    """The run-directory check: one shared folder passes; a folder per rank (as on nodes that do
    not share it) fails on every rank."""
    from swerl.errors import ConfigError
    from swerl.trainer.persistence.shared_dir import check_shared_run_dir

    outcomes = {}
    for name, folder in (("shared", out / "run"), ("per_rank", out / f"run-rank{info.rank}")):
        folder.mkdir(exist_ok=True)
        try:
            check_shared_run_dir(folder, info, wait_s=0.5)
            outcomes[name] = "ok"
        except ConfigError as err:
            outcomes[name] = str(err)
        outcomes[name + "_left"] = sorted(p.name for p in folder.iterdir())
    (out / f"shared-rank{info.rank}.json").write_text(json.dumps(outcomes))


if __name__ == "__main__":
    dist_info = distributed.init_distributed("cpu")
    for name in sys.argv[2:]:
        update(Path(sys.argv[1]), name, dist_info)
    shared_dir_cases(Path(sys.argv[1]), dist_info)
    distributed.destroy()
