"""The rollout pipeline (k = 1) generating with real vLLM, both ways swerl runs it: the session's
in-process engine, and the suite's pool of two vLLM OpenAI servers that swerl started (the
``servers`` mode), on the default model (SmolLM2-135M-Instruct, bf16), the fp32 trainer on the same
model, the learning tasks in real Docker sandboxes. The producer thread generates while the trainer
updates; after every step the trainer reloads the engines' weights between two generate calls and
runs the parity probe. Checked: the staleness bound (and that the producer did run ahead), each
turn's weight version, the probe at every step, TIS fed by every turn's own log-probs, and every
prompt of the plan trained once in its step. The servers' run trains LoRA adapters (rank 8): each
step's sync loads a new adapter into both servers at runtime (``AdapterSync``), the probe holds, and
``inference/weight_sync_bytes`` is the bf16 adapter's size; the in-process run is full fine-tuning.
Those two runs use the timing-driven schedule (``loop.exact_staleness: false``), whose sync lands
mid-batch. A third runs the in-process engine on the exact schedule (the default) twice, once with
a much slower trainer: every turn of batch s is sampled by version max(s - 2, 0) either way. (Its
samples are not compared: on this shared engine two runs differ in the last bf16 bits of the
log-probs, and now and then in a token, with which requests share a forward, at k = 0 too.)

The in-process engine is called from the producer's threads and the trainer's: it runs every call
on its own owner thread (``swerl/inference/engines/engine_thread.py``); before that, the first call from
the producer could fail in vLLM and leave the engine spinning (seen when torch ran on 1 thread).

Run: ``pytest -m vllm tests/trainer/rollouts/test_pipeline_vllm.py`` (~2-4 min per engine kind on 2 cores).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
import torch

from swerl.inference.engines.engine_pool import EnginePool
from swerl.inference.weight_sync.disk import write_weights
from swerl.tasks.load import load_tasks
from swerl.trainer.config import TrainConfig
from swerl.trainer.rollouts.generator import attach_sync
from swerl.trainer.rollouts.sampler import PromptSampler

from ..test_loop import TASKS, records
from .test_pipeline import dumped

pytestmark = [
    pytest.mark.vllm, pytest.mark.docker, pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (make setup installs it)"),
]

K, STEPS, LIMIT = 1, 3, 0.1


ENGINES = {"inprocess": {"vllm_mode": "inprocess"},
           "servers": {"vllm_mode": "servers", "num_servers": 2, "cpu_cores": ["0", "1"]}}  # = conftest's pool


LORA = {"rank": 8, "alpha": 16.0}


def vllm_config(model_path, mode: str, lora: dict | None = None, exact: bool = False) -> TrainConfig:
    """2 prompts x 2 samples per step, 8 new tokens, a learning rate small enough that the bf16
    engine stays within the probe's limit of the fp32 trainer (the sync, not learning, is tested;
    LoRA's adapters start at zero, so they get 100x)."""
    return TrainConfig.model_validate({
        "model": {"path": str(model_path), "device": "cpu", "lora": lora},
        "data": {"tasks": str(TASKS)},
        "agent": {"protocol": "single-turn", "temperature": 0.7,
                  "limits": {"max_new_tokens_per_turn": 8, "context_window_tokens": 512, "max_turns": 1}},
        "sandbox": {"concurrency": 4},
        "generator": {"backend": "vllm", **ENGINES[mode], "dtype": "bfloat16", "max_model_len": 1024,
                      "logprob_diff_limit": LIMIT, "probe_tokens": 16},
        "algorithm": {"n_samples_per_prompt": 2, "min_group_size": 2, "use_tis": True, "max_seq_len": 512},
        "optimizer": {"lr": 1e-4 if lora else 1e-6},
        "loop": {"train_batch_size": 2, "epochs": 2, "max_steps": STEPS, "micro_batch_size": 4,
                 "max_staleness_steps": K, "exact_staleness": exact},
        "checkpointing": {"ckpt_interval": 0, "hf_save_interval": 0, "save_final": False},
        "logging": {"dump_trajectories": True, "tensorboard": False},
        "seed": 5,
    })


def restore_default_weights(backend, trainer_model, folder) -> None:
    """The session's engines hold the default model's weights (version 0) again."""
    backend.reload_weights(str(write_weights(trainer_model.state_dict(), folder, torch.bfloat16, 0)), 0)


def reset_engines(backend, trainer_model, folder) -> None:
    """No adapter on any of ``backend``'s engines, the default weights at version 0."""
    for engine in backend.engines if isinstance(backend, EnginePool) else [backend]:
        engine.unload_adapter()
    restore_default_weights(backend, trainer_model, folder)


def run_pipeline(backend, cfg: TrainConfig, run_dir, slow_s: float = 1.5) -> None:
    """A 3-step run at k = 1 on the session's ``backend``, its update slowed by ``slow_s`` so the
    producer runs ahead. The engines end with the last version a batch needed: STEPS, or on the
    exact schedule STEPS - 1 - K (no batch samples a later one)."""
    import swerl.trainer.loop as loop

    real_update = loop.train_on_batch

    def slow_update(*args, **kwargs):
        time.sleep(slow_s)  # batch s + 1 is then sampled while step s trains: staleness 1
        return real_update(*args, **kwargs)

    def session_generator(config, model, tokenizer, model_path, run_dir, info):
        return attach_sync(backend, config, model, run_dir, info, owns_backend=False)  # the session owns them

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "make_generator", session_generator)
        mp.setattr(loop, "train_on_batch", slow_update)
        result = loop.train(cfg, run_dir)
    last = STEPS - 1 - K if cfg.loop.exact_staleness else STEPS
    assert result.steps_trained == STEPS and backend.weight_version == last


def vllm_run(backend, mode: str, model_path, trainer_model, tmp_path, lora: dict | None = None,
             exact: bool = False, name: str = "run", slow_s: float = 1.5) -> tuple[TrainConfig, Path]:
    """The run on ``backend`` (ENGINES[mode]); afterwards the backend holds version 0 again, no adapter."""
    cfg = vllm_config(model_path, mode, lora, exact)
    reset_engines(backend, trainer_model, tmp_path / f"v0-before-{name}")  # whatever an earlier user left
    try:
        run_pipeline(backend, cfg, tmp_path / name, slow_s)
    finally:
        reset_engines(backend, trainer_model, tmp_path / f"v0-{name}")
    return cfg, tmp_path / name


# One test per engine kind, each naming its fixture: the server pool stops after its last user (tests/conftest.py).
def test_the_inprocess_engine_under_the_pipeline_syncs_between_requests_within_the_bound(
        engine, model_path, trainer_model, tmp_path):
    cfg, run = vllm_run(engine, "inprocess", model_path, trainer_model, tmp_path)
    check_synced_within_the_bound(cfg, run)
    every_weight = 2 * sum(p.numel() for p in trainer_model.parameters())  # bf16, the tied head once
    assert {r["inference/weight_sync_bytes"] for r in records(run)} == {every_weight}


def test_the_inprocess_engine_on_the_exact_schedule_samples_batch_s_with_version_s_minus_2_whatever_the_timing(
        engine, model_path, trainer_model, tmp_path):
    for name, slow_s in (("plain", 0.0), ("slowed", 3.0)):
        _, run = vllm_run(engine, "inprocess", model_path, trainer_model, tmp_path, exact=True, name=name, slow_s=slow_s)
        rows = dumped(run)
        for step in range(1, STEPS + 1):
            versions = {tuple(r["turn_weight_versions"]) for r in rows[step] if r["turn_weight_versions"]}
            assert versions == {(max(step - 1 - K, 0),)}, (name, step, versions)
        recs = records(run)
        assert [r["async/staleness_max"] for r in recs] == [0.0] + [float(K)] * (STEPS - 1)
        assert all(r["tis/rows_without_logprobs"] == 0 for r in recs)
        # A sync is staged only where a later batch needs it (version 1, for batch 3); the engine then
        # ends at version 1 (run_pipeline checks it).
        assert [r.get("inference/weight_sync_bytes", 0.0) > 0 for r in recs] == [True, False, False]


def test_two_servers_under_the_pipeline_sync_lora_adapters_between_requests_within_the_bound(
        servers, model_path, trainer_model, tmp_path):
    cfg, run = vllm_run(servers, "servers", model_path, trainer_model, tmp_path, lora=LORA)
    check_synced_within_the_bound(cfg, run)
    # r x (in + out) per linear of SmolLM2's 30 layers (d 576, kv 192, mlp 1536), 2 bytes each (bf16)
    adapter_bytes = 2 * 30 * LORA["rank"] * (2 * (576 + 576) + 2 * (576 + 192) + 3 * (576 + 1536))
    assert {r["inference/weight_sync_bytes"] for r in records(run)} == {adapter_bytes}


def check_synced_within_the_bound(cfg: TrainConfig, run: Path) -> None:
    """The records and dumped turns of a k = 1 run: the probe, TIS's log-probs, every planned prompt once, the staleness bound."""
    recs = records(run)
    assert [r["global_step"] for r in recs] == list(range(1, STEPS + 1))

    # The parity probe ran after every sync, while the producer was generating, and agreed.
    assert all(r["inference/logprob_diff_mean"] < LIMIT for r in recs), [r.get("inference/logprob_diff_mean") for r in recs]
    assert all(r["tis/rows_without_logprobs"] == 0 for r in recs)

    task_names = [task.name for task in load_tasks(cfg.data.tasks)]
    sampler = PromptSampler(len(task_names), cfg.loop.train_batch_size, cfg.data_seed, cfg.data.shuffle)
    rows = dumped(run)
    lags = {}
    for rec in recs:
        step = rec["global_step"]
        # Every prompt of the plan's batch, every sample, once: nothing lost, nothing repeated.
        _, indices = sampler.next_batch()
        planned = sorted((task_names[i], s) for i in indices for s in range(cfg.n_samples))
        assert sorted((r["task_name"], r["sample_index"]) for r in rows[step]) == planned, step
        # Each turn records the version that sampled it: never newer than pi_old, never more than k older.
        sampled = []
        for row in rows[step]:
            versions = row["turn_weight_versions"]
            if not versions and row["end_reason"] == "sandbox_error" and row["failure_class"] == "mask":
                continue  # its sandbox never ran (a container start refused under load): no turn to check, masked
            sampled.append(row)
            assert versions and versions == sorted(versions), (row["group_id"], row["end_reason"], row["detail"])
            assert step - 1 - K <= min(versions) and max(versions) <= step - 1, (step, versions)
            # TIS's mu: the engine's log-prob of every token of the turn, as that version sampled it.
            mu = row["rollout_logprobs"]
            assert mu is not None and len(mu) == len(row["response_ids"]) > 0 and all(v <= 0 for v in mu)
        assert len(sampled) >= len(rows[step]) - 1, [(r["group_id"], r["detail"]) for r in rows[step]]
        lags[step] = max(step - 1 - min(r["turn_weight_versions"]) for r in sampled)
        assert rec["async/staleness_max"] == lags[step] <= K
    assert max(lags.values()) > 0, lags  # the producer generated while the trainer updated
