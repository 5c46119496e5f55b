"""Every metric key that crosses a stage, spelled once: the stage that writes a key and the ones
that read it (the loop, the model card, selection, the report, the CLI) import it from here.

A leaf of the import graph, like ``run_layout.py``: it imports nothing of swerl. The names are a
contract (docs/metrics.md says what each one means): a run's metrics.jsonl keeps them, so a
constant's value never changes. A key that one module both writes and reads may stay a literal
there; once a second module spells it, it belongs here (tests/test_metric_keys.py checks both).
Keys are slash-namespaced, ``namespace/name``; a constant is the key in capitals, ``/`` and
``@`` spelled ``_`` and ``_AT_``.
"""

from __future__ import annotations

# advantage/: rl/advantages.py: the advantage estimators' group counts
ADVANTAGE_BELOW_MIN_GROUPS = "advantage/below_min_groups"
ADVANTAGE_ZERO_VARIANCE_GROUPS = "advantage/zero_variance_groups"

# async/: trainer/rollouts/pipeline.py (staleness) and rollouts/busy.py (busy shares)
ASYNC_BUSY_PREFIX = "async/busy_"  # + a phase: generation, sandbox, update
ASYNC_STALENESS_MAX = "async/staleness_max"
ASYNC_STALENESS_MEAN = "async/staleness_mean"

# dynamic_sampling/: trainer/rollouts/dynamic.py
DYNAMIC_SAMPLING_GROUPS_KEPT = "dynamic_sampling/groups_kept"
DYNAMIC_SAMPLING_GROUPS_DROPPED = "dynamic_sampling/groups_dropped"
DYNAMIC_SAMPLING_ROUNDS = "dynamic_sampling/rounds"

# eval/: trainer/rollouts/evaluation.py: held-out evaluation
EVAL_NUM_MASKED = "eval/num_masked"
EVAL_NUM_TASKS = "eval/num_tasks"
EVAL_PASS_AT_1 = "eval/pass@1"
EVAL_REWARD = "eval/reward"

# inference/: trainer/rollouts/generator.py and inference/probe.py: weight sync and the parity probe
INFERENCE_LOGPROB_DIFF_MAX = "inference/logprob_diff_max"
INFERENCE_LOGPROB_DIFF_MEAN = "inference/logprob_diff_mean"
INFERENCE_PROBE_TOKENS = "inference/probe_tokens"
INFERENCE_WEIGHT_SYNC_BYTES = "inference/weight_sync_bytes"

# loss/: rl/loss.py (loss/kl_share: trainer/step/update.py)
LOSS_KL = "loss/kl"
LOSS_KL_SHARE = "loss/kl_share"
LOSS_POLICY = "loss/policy"
LOSS_POLICY_ABS = "loss/policy_abs"
LOSS_TOTAL = "loss/total"

# policy/: rl/loss.py (policy/optimizer_steps: trainer/step/update.py)
POLICY_CLIP_FRACTION = "policy/clip_fraction"
POLICY_ENTROPY = "policy/entropy"
POLICY_KL_REF_MEAN = "policy/kl_ref_mean"
POLICY_OPTIMIZER_STEPS = "policy/optimizer_steps"

# response_length/: trainer/tracking/metrics.py: the step's trajectories
RESPONSE_LENGTH_CLIP_FRACTION = "response_length/clip_fraction"
RESPONSE_LENGTH_MASKED_MEAN = "response_length/masked_mean"
RESPONSE_LENGTH_MAX = "response_length/max"
RESPONSE_LENGTH_MEAN = "response_length/mean"
RESPONSE_LENGTH_OVERLONG_FILTERED_FRACTION = "response_length/overlong_filtered_fraction"
RESPONSE_LENGTH_REWARD_POS_MEAN = "response_length/reward_pos_mean"
RESPONSE_LENGTH_REWARD_ZERO_MEAN = "response_length/reward_zero_mean"

# reward/: trainer/tracking/metrics.py (reward/mean: agent/metrics.py, an eval's summary)
REWARD_AVG_PASS_AT_N = "reward/avg_pass_at_n"
REWARD_AVG_RAW_REWARD = "reward/avg_raw_reward"
REWARD_MEAN = "reward/mean"
REWARD_NUM_TRAJECTORIES = "reward/num_trajectories"

# rollout/: trainer/rollouts/pipeline.py and rollouts/slots.py: the producer's episode slots
ROLLOUT_SLOT_IDLE_SHARE = "rollout/slot_idle_share"

# sandbox/: trainer/tracking/metrics.py: how the step's containers were ready
SANDBOX_CONTAINER_WAIT_S = "sandbox/container_wait_s"
SANDBOX_POOL_HIT_RATE = "sandbox/pool_hit_rate"

# timing/: the trainer's loop, rollouts and persistence: wall-clock seconds
TIMING_EVAL_S = "timing/eval_s"
TIMING_EXPORT_S = "timing/export_s"
TIMING_ROLLOUT_S = "timing/rollout_s"
TIMING_STEP_S = "timing/step_s"
TIMING_UPDATE_S = "timing/update_s"
TIMING_WAIT_FOR_ROLLOUTS_S = "timing/wait_for_rollouts_s"
TIMING_WEIGHT_SYNC_S = "timing/weight_sync_s"
TIMING_WEIGHT_SYNC_WAIT_S = "timing/weight_sync_wait_s"

# tis/: rl/rollout_correction.py: the rollout correction's weights and ratio
TIS_IMP_RATIO_CAPPED_FRACTION = "tis/imp_ratio_capped_fraction"
TIS_IMP_RATIO_MEAN = "tis/imp_ratio_mean"
TIS_LOG_RATIO_ABS_MEAN = "tis/log_ratio_abs_mean"
TIS_LOG_RATIO_ABS_MEAN_LAG_PREFIX = "tis/log_ratio_abs_mean_lag"  # + a version-lag bucket: 0, 1, 2, 3plus
TIS_LOG_TRUNCATION_MASS = "tis/log_truncation_mass"
TIS_MASKED_FRACTION = "tis/masked_fraction"
TIS_MASKED_NEG_ADV_FRACTION = "tis/masked_neg_adv_fraction"
TIS_MISMATCH_LOG_RATIO_ABS_MEAN = "tis/mismatch_log_ratio_abs_mean"
TIS_RATIO_MEAN = "tis/ratio_mean"
TIS_ROWS_WITHOUT_LOGPROBS = "tis/rows_without_logprobs"

# tokens/: agent/metrics.py: an eval's summary
TOKENS_CONTEXT_MEAN = "tokens/context_mean"
TOKENS_GENERATED_MEAN = "tokens/generated_mean"

# turns/: agent/metrics.py and trainer/tracking/metrics.py
TURNS_MEAN = "turns/mean"

# update/: trainer/step/nonfinite.py
UPDATE_SKIPPED_NONFINITE_STEPS = "update/skipped_nonfinite_steps"
