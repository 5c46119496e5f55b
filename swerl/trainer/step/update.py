"""The policy update of one training step: old log-probs, then micro-batched optimizer steps.

Once per training step: log pi_old of every row (the weights that produced the batch) and, with a
KL term, log pi_ref of the reference policy beside it. Per optimizer step (docs/algorithms.md, Loss
reductions): count the step's denominators over all its micro-batches, SUM them over ranks (one
all-reduce), then for each micro-batch forward at the sampling temperature, ``compute_policy_loss``
on its ``LossInputs`` (PPO clip, rollout correction, reduction, KL) and ``backward``, its metrics
kept on the device until one all-reduce and one read per optimizer step; gradients are SUMMED
over ranks once per optimizer step (replicated models: one all-reduce; FSDP: one reduce-scatter
after the last micro-batch, its average cancelled by scaling the loss by W); clip the global norm,
step AdamW and the schedule. Nothing is divided by the number of micro-batches. Padding rows (rank
balance) and failed rows carry an all-zero loss mask, so they reach neither a numerator nor a
denominator.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Protocol

import torch

from swerl import metric_keys
from swerl.rl.config import AlgorithmConfig
from swerl.rl.logprobs import next_token_logprobs, next_token_logprobs_on_support
from swerl.rl.loss import LossInputs, ReportedKeys, compute_policy_loss, kl_share, reported_metric_keys
from swerl.rl.reductions import StepDenominators, denominator_parts, dp_loss_scale
from swerl.rl.rollout_correction import lag_means
from swerl.trainer.step.batch import MicroBatch, Row, collate, mini_batches, padding_row
from swerl.trainer.step.lm_head import chunked_forward, forward_chunk_tokens
from swerl.trainer.step.packing import PackMode, packed_forward, packs_rows
from swerl.trainer.distributed import DistInfo, all_reduce_grads, all_reduce_max, all_reduce_sum, rank_slice
from swerl.trainer.step.nonfinite import SKIPPED, skip_counts, step_if_finite


class ReferencePolicy(Protocol):
    """What the update reads of the KL term's frozen reference (swerl.trainer.step.reference implements
    it; named here so the update does not import the module that builds on its forward)."""

    def logprobs(self, mb: MicroBatch) -> torch.Tensor:
        """log pi_ref of ``mb``'s next tokens, shape [B, T-1], no gradient."""

    def resident(self) -> contextlib.AbstractContextManager:
        """A context during which the reference's weights are on the compute device."""


@dataclass(frozen=True)
class UpdateSettings:
    """What the update needs besides the model and the rows.

    Attributes:
        temperature: sampling temperature; every trainer forward divides logits by it.
        rows_per_mini_batch: episodes (prompts x samples) per optimizer step; a summarized
            episode brings one row per token sequence.
        micro_batch_size: rows per forward/backward on one rank.
        update_epochs: passes over the mini-batches.
        grad_clip: max global grad norm, or None.
        compute_dtype: autocast dtype on a replicated model (None = fp32).
        sharded: True when the model is FSDP-sharded (it averages gradients itself).
        sync_grads_every_micro_batch: sharded only: reduce-scatter gradients after every
            micro-batch (they stay sharded) instead of once, after the optimizer step's last
            micro-batch (FSDP2 ``set_requires_gradient_sync``: fewer collectives, but each rank
            holds the unsharded fp32 gradients of the whole model in between).
        pad_id: padding token id.
        skip_no_signal_rows: do not forward rows whose advantage is 0 or that have no trainable
            token (their policy loss and gradient are exactly 0); they still count in the
            denominators. Ignored when an entropy bonus or a KL term is on (they touch every token).
        replay_support: normalise every forward over the stored kept sets
            (``algorithm.sampling_support=replay``; rows without one use the vocabulary).
        reuse_pi_old: with one update epoch, the first optimizer step's forward runs on the
            weights that produced the batch, so its log-probs, detached, ARE log pi_old of its
            rows: no separate pi_old forward for them (2 of the 8N FLOPs per token). False runs
            it anyway (the reference path in tests and benches).
        lm_head_chunk_tokens: positions per chunk of the LM head (``model.lm_head_chunk_tokens``):
            None = auto (chunked where the logits would be large, ``trainer.step.lm_head``), 0 = the
            model's own head, k > 0 = k positions.
        pack_rows: how each forward lays out its micro-batch's rows (``model.pack_rows`` resolved by
            ``trainer.step.packing.pack_choice``): ``off`` = padded to its longest row, else packed
            without padding between rows; the same micro-batches and the same loss either way.
    """

    temperature: float
    rows_per_mini_batch: int
    micro_batch_size: int = 1
    update_epochs: int = 1
    grad_clip: float | None = 1.0
    compute_dtype: torch.dtype | None = None
    sharded: bool = False
    sync_grads_every_micro_batch: bool = False
    pad_id: int = 0
    skip_no_signal_rows: bool = True
    reuse_pi_old: bool = True
    replay_support: bool = False
    lm_head_chunk_tokens: int | None = None
    pack_rows: PackMode = "off"


def _autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _autocast_dtype(s: UpdateSettings) -> torch.dtype | None:
    """Autocast only replicated models: a sharded one computes in FSDP's param dtype already."""
    return None if s.sharded else s.compute_dtype


def forward_logprobs(
    model: torch.nn.Module, mb: MicroBatch, temperature: float, with_entropy: bool = False,
    compute_dtype: torch.dtype | None = None, lm_head_chunk_tokens: int | None = None, pack_rows: PackMode = "off",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi (and optionally the entropy) of every next token at the sampling temperature.

    Mixed precision: the model runs under ``compute_dtype`` autocast (replicated model) or in
    FSDP's bf16 param dtype; the temperature, log-softmax and everything after them (the loss)
    are computed in float32 outside autocast, a chunk of positions at a time
    (``rl.logprobs.next_token_logprobs``: no float32 (L, V) tensor, same values and gradients).
    With ``mb.replay_support`` a token with a stored kept set is normalised over it
    (``rl.logprobs.next_token_logprobs_on_support``), otherwise over the vocabulary.

    Only the columns from the micro-batch's first response column s0 on are computed: the LM head
    and the log-softmax skip the prompt positions before it (``logits_to_keep``; no row has a
    response token there, so those columns are loss-masked in every row).

    ``lm_head_chunk_tokens``, ``pack_rows``: as :func:`forward_with_mass`.

    Returns: (n, L-1) float32 log-probs, and (n, L-1) float32 entropies or None; 0 in columns < s0.
    """
    logprobs, entropy, _ = forward_with_mass(model, mb, temperature, with_entropy, compute_dtype, lm_head_chunk_tokens,
                                             pack_rows)
    return logprobs, entropy


def forward_with_mass(
    model: torch.nn.Module, mb: MicroBatch, temperature: float, with_entropy: bool = False,
    compute_dtype: torch.dtype | None = None, lm_head_chunk_tokens: int | None = None, pack_rows: PackMode = "off",
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """:func:`forward_logprobs` plus (n, L-1) float32 log S_t, the log of the mass each token's
    stored kept set holds under the forwarded weights (0 where none; None when ``mb.support`` is None).

    ``lm_head_chunk_tokens`` (``model.lm_head_chunk_tokens``; None = auto, 0 = off): with k > 0 the
    LM head runs k positions at a time on the final hidden states (``trainer.step.lm_head``): same
    values and gradients, no (n, L - s0, V) logits nor their gradient.

    ``pack_rows`` (``UpdateSettings.pack_rows``): a layout other than ``off`` forwards the rows packed
    (``trainer.step.packing``) wherever that merges rows: the same values on the same grid, 0 in a
    row's prompt columns (loss-masked)."""
    if packs_rows(mb, pack_rows):
        with _autocast(mb.input_ids.device, compute_dtype):
            return packed_forward(model, mb, temperature, with_entropy, lm_head_chunk_tokens, pack_rows)
    start = int(mb.response_starts.min()) if mb.response_starts.numel() else 0
    chunk = forward_chunk_tokens(model, lm_head_chunk_tokens, mb.input_ids.shape[0], mb.input_ids.shape[1] - start)
    if chunk:  # the LM head a chunk of positions at a time: no (n, L - s0, V) logits
        with _autocast(mb.input_ids.device, compute_dtype):
            logprobs, entropy, log_mass = chunked_forward(model, mb, start, temperature, with_entropy, chunk)
        return (_from_column(logprobs, start), None if entropy is None else _from_column(entropy, start),
                None if log_mass is None else _from_column(log_mass, start))
    with _autocast(mb.input_ids.device, compute_dtype):
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False,
                       logits_to_keep=mb.input_ids.shape[1] - start).logits  # (n, L - s0, V)
    if mb.support is None:
        logprobs, entropy = next_token_logprobs(logits, mb.input_ids[:, start:], temperature,
                                                with_entropy=with_entropy)
        log_mass = None
    else:
        logprobs, entropy, log_mass = next_token_logprobs_on_support(
            logits, mb.input_ids[:, start:], mb.support[:, start:], temperature, replay=mb.replay_support,
            with_entropy=with_entropy)
        log_mass = _from_column(log_mass, start)
    return _from_column(logprobs, start), (None if entropy is None else _from_column(entropy, start)), log_mass


def _from_column(values: torch.Tensor, start: int) -> torch.Tensor:
    """(n, L-1-start) columns placed at ``start`` of an (n, L-1) grid of zeros."""
    return torch.nn.functional.pad(values, (start, 0)) if start else values


def rank_rows(mini_batch: list[Row], dist_info: DistInfo, algo: AlgorithmConfig, s: UpdateSettings) -> list[Row]:
    """This rank's share of a mini-batch, longest first, length-balanced, padded so every rank has as many rows.

    On one rank: every row, the forwarded ones longest first (ties in batch order), so consecutive
    micro-batches hold rows of similar length and a micro-batch pads to about its own rows' length,
    not the batch's longest (length bucketing; the loss is a sum over rows, so the order changes
    only the float summation order).

    The rows to forward (:func:`rows_to_forward`) are sorted longest first and dealt to the ranks
    in snake order (0..W-1, W-1..0, ...), then the others (no forward, they only count in the
    denominators) the same way. Each rank's forwarded rows thus come longest first, and its i-th
    micro-batch holds rows of about the length of every other rank's i-th: under FSDP's lockstep
    a micro-batch costs its longest row on any rank, so this is what minimizes the padding and
    the waiting (verl balances sequence lengths across ranks the same way). ``rows`` is identical
    on every rank, so every rank computes the same deal. Slots past a rank's rows are short
    padding rows (:func:`padding_row`).
    """
    world = dist_info.world_size
    forwarded = {id(r) for r in rows_to_forward(mini_batch, algo, s)}
    order = sorted(range(len(mini_batch)), key=lambda i: (id(mini_batch[i]) not in forwarded,
                                                          -len(mini_batch[i].prompt_ids) - len(mini_batch[i].response_ids), i))
    if world == 1:  # length-bucketed micro-batches: each pads to rows of about its own length
        return [mini_batch[i] for i in order]
    mine = [mini_batch[i] for k, i in enumerate(order) if snake_rank(k, world) == dist_info.rank]
    per_rank = rank_slice(len(mini_batch), dist_info.rank, world)[1]
    while len(mine) < per_rank:
        mine.append(padding_row(mini_batch[-1]))
    return mine


def snake_rank(k: int, world_size: int) -> int:
    """The rank that takes the ``k``-th longest row: 0..W-1 in even rounds, W-1..0 in odd ones."""
    turn, rank = divmod(k, world_size)
    return rank if turn % 2 == 0 else world_size - 1 - rank


def has_signal(row: Row) -> bool:
    """True when the row can change the policy loss: non-zero advantage and a trainable token."""
    return row.advantage != 0.0 and row.num_trainable_tokens > 0


def rows_to_forward(rows: list[Row], algo: AlgorithmConfig, s: UpdateSettings) -> list[Row]:
    """The rows whose forward/backward is needed (all of them unless skipping is allowed)."""
    if not s.skip_no_signal_rows or algo.entropy_coef > 0 or algo.use_kl_loss:
        return rows
    return [r for r in rows if has_signal(r)]


def _pad_to_common_length(rows: list[Row], template: Row, s: UpdateSettings) -> list[Row]:
    """FSDP: every rank must run as many micro-batches; pad with empty rows to the ranks' max."""
    if not s.sharded:
        return rows
    longest = all_reduce_max(len(rows))
    return rows + [padding_row(rows[0] if rows else template)] * (longest - len(rows))


def _require_grad_sync(model: torch.nn.Module, s: UpdateSettings, last: bool) -> None:
    """FSDP2: reduce-scatter this micro-batch's gradients only when it is the optimizer step's
    ``last`` (or always with ``sync_grads_every_micro_batch``); the earlier ones accumulate
    unsharded. Every rank runs as many micro-batches, so they agree on which one is last."""
    from torch.distributed.fsdp import FSDPModule

    if s.sharded and isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(last or s.sync_grads_every_micro_batch)


def _micro_batches(rows: list[Row], size: int) -> list[list[Row]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


@torch.no_grad()
def with_old_logprobs(
    model: torch.nn.Module, rows: list[Row], s: UpdateSettings, device: torch.device, template: Row | None = None
) -> list[Row]:
    """Attach log pi_old (current weights, sampling temperature) to each row, micro-batched.

    Sharded: every rank runs as many forwards (padding rows built from ``template`` or
    ``rows[0]`` fill the shorter ranks; their outputs are dropped).
    """
    forwarded = _pad_to_common_length(rows, template or (rows[0] if rows else None), s)
    out: list[Row] = []
    for chunk in _micro_batches(forwarded, s.micro_batch_size):
        mb = collate(chunk, s.pad_id, s.replay_support).to(device)
        lp, _, mass = forward_with_mass(model, mb, s.temperature, compute_dtype=_autocast_dtype(s),
                                        lm_head_chunk_tokens=s.lm_head_chunk_tokens, pack_rows=s.pack_rows)
        masses = mb.response_values(mass) if mass is not None else [None] * len(chunk)
        out.extend(replace(r, old_logprobs=v, old_log_mass=m) for r, v, m in zip(chunk, mb.response_values(lp), masses))
    return out[: len(rows)]


@torch.no_grad()
def with_ref_logprobs(
    reference: ReferencePolicy, rows: list[Row], s: UpdateSettings, device: torch.device, template: Row | None = None
) -> list[Row]:
    """Attach log pi_ref (the reference policy at the sampling temperature) to each row, micro-batched.

    Sharded: every rank runs as many forwards, as :func:`with_old_logprobs`. Call it inside
    ``reference.resident()``.
    """
    forwarded = _pad_to_common_length(rows, template or (rows[0] if rows else None), s)
    out: list[Row] = []
    for chunk in _micro_batches(forwarded, s.micro_batch_size):
        mb = collate(chunk, s.pad_id, s.replay_support).to(device)
        out.extend(replace(r, ref_logprobs=v) for r, v in zip(chunk, mb.response_values(reference.logprobs(mb))))
    return out[: len(rows)]


def _with_pi_old(model: torch.nn.Module, mini: list[Row], algo: AlgorithmConfig, s: UpdateSettings,
                 dist_info: DistInfo) -> list[Row]:
    """This rank's rows of one mini-batch, with log pi_old on each row that will be forwarded."""
    mine = rank_rows(mini, dist_info, algo, s)
    needed = {id(r) for r in rows_to_forward(mine, algo, s)}
    with_old = iter(with_old_logprobs(model, [r for r in mine if id(r) in needed], s, dist_info.device, mine[0]))
    return [next(with_old) if id(r) in needed else r for r in mine]


def _with_pi_ref(reference: ReferencePolicy, local: list[list[Row]], algo: AlgorithmConfig, s: UpdateSettings,
                 dist_info: DistInfo) -> list[list[Row]]:
    """This rank's mini-batches with log pi_ref on each row that will be forwarded (the reference's
    weights brought to the device once for the step)."""
    out = []
    with reference.resident():
        for mine in local:
            needed = {id(r) for r in rows_to_forward(mine, algo, s)}
            with_ref = iter(with_ref_logprobs(reference, [r for r in mine if id(r) in needed], s, dist_info.device,
                                              mine[0]))
            out.append([next(with_ref) if id(r) in needed else r for r in mine])
    return out


def _plan_step(rows: list[Row], algo: AlgorithmConfig, s: UpdateSettings, dist_info: DistInfo,
               ) -> tuple[StepDenominators, list[Row], list[tuple[MicroBatch, torch.Tensor]]]:
    """One optimizer step's denominators over ALL its rows on every rank (one all-reduce), the rows
    to forward (those carrying signal; the others add exactly 0 to the numerator) and their
    micro-batches with (b,) advantages."""
    parts = sum((denominator_parts(r.loss_mask[None], torch.tensor([r.advantage])) for r in rows),
                StepDenominators.zero())
    denominators = StepDenominators.from_tensor(all_reduce_sum(parts.as_tensor(dist_info.device)))
    forwarded = _pad_to_common_length(rows_to_forward(rows, algo, s), rows[0], s)
    chunks = _micro_batches(forwarded, s.micro_batch_size)
    micro = [collate(chunk, s.pad_id, s.replay_support) for chunk in chunks]
    return denominators, forwarded, list(zip(micro, [torch.tensor([r.advantage for r in c]) for c in chunks]))


def _apply_gradients(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                     scheduler: torch.optim.lr_scheduler.LRScheduler, s: UpdateSettings) -> tuple[float, float, float]:
    """Sum the ranks' gradients, clip, step AdamW (unless a gradient is NaN/inf) and the schedule.

    Returns: (grad_norm, the step's lr, 1.0 when the step was skipped else 0.0).
    """
    # A parameter no forwarded row touched has gradient 0, not None: AdamW must still apply its
    # momentum exactly as if the skipped rows had been forwarded.
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    # Replicated weights: SUM the ranks' gradients (the formula's gradient, no 1/W).
    if not s.sharded:
        all_reduce_grads(model)
    max_norm = s.grad_clip if s.grad_clip is not None else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if hasattr(grad_norm, "full_tensor"):
        grad_norm = grad_norm.full_tensor()
    lr = optimizer.param_groups[0]["lr"]
    skipped = step_if_finite(optimizer, grad_norm)  # a NaN/inf gradient must never reach the weights
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return float(grad_norm), lr, skipped


def _loss_inputs(mb: MicroBatch, logprobs: torch.Tensor, entropy: torch.Tensor | None,
                 log_mass: torch.Tensor | None, advantages: torch.Tensor, reused: bool) -> LossInputs:
    """The loss's view of a forwarded micro-batch (on the device); ``reused``: this forward ran on the
    weights that produced the batch, so its detached log-probs and mass are pi_old's."""
    return LossInputs(
        logprobs=logprobs, old_logprobs=logprobs.detach() if reused else mb.old_logprobs, advantages=advantages,
        loss_mask=mb.loss_mask, rollout_logprobs=mb.rollout_logprobs, has_rollout_logprobs=mb.has_rollout_logprobs,
        ref_logprobs=mb.ref_logprobs, entropy=entropy,
        log_truncation_mass=log_mass if reused else mb.old_log_mass, version_lag=mb.version_lag,
    )


def _step_metrics(totals: dict[str, torch.Tensor], forwarded: list[Row], denominators: StepDenominators,
                  algo: AlgorithmConfig, reported: ReportedKeys, device: torch.device) -> dict[str, float]:
    """The optimizer step's loss metrics, summed over micro-batches (``totals``: 0-dim float64
    tensors on ``device``, one per reported key) and ranks, read from the device once."""
    # Metrics are additive over micro-batches and ranks (see LossOutputs); every rank sends the same
    # keys, even one that forwarded nothing, and the forwarded tokens ride the same all-reduce.
    keys = sorted(reported.all)
    fwd_tokens = torch.tensor(float(sum(r.num_trainable_tokens for r in forwarded)), dtype=torch.float64, device=device)
    *summed, fwd_tokens = all_reduce_sum(torch.stack([*(totals[k] for k in keys), fwd_tokens])).tolist()
    out = dict(zip(keys, summed))
    # Token means over the forwarded rows (compute_policy_loss divides by all tokens); undefined,
    # so left out, when no row was forwarded (a step without signal).
    for key in sorted(reported.token_means):
        if fwd_tokens > 0:
            out[key] *= denominators.num_tokens / fwd_tokens
        else:
            del out[key]
    if algo.use_kl_loss:
        out[metric_keys.LOSS_KL_SHARE] = kl_share(out, algo.kl_loss_coef)
    out = lag_means(out)  # the per-lag parts of |log pi_old - log mu| -> their means
    out.update({"policy/num_tokens": denominators.num_tokens, "policy/num_signal_rows": denominators.num_signal_rows})
    return out


def _mean_over_steps(history: list[dict[str, float]], rows: list[Row], algo: AlgorithmConfig) -> dict[str, float]:
    """Per-optimizer-step metrics averaged over the steps that have them, plus the counts that are
    totals (see ``train_on_batch``)."""
    keys = sorted({k for h in history for k in h})
    out = {k: sum(h[k] for h in history if k in h) / sum(k in h for h in history) for k in keys}
    out[metric_keys.POLICY_OPTIMIZER_STEPS] = float(len(history))
    out.update(skip_counts([h[SKIPPED] for h in history]))  # counts over the step, not means
    if algo.correction is not None:  # every row of the step, forwarded or not (rows is identical on every rank)
        out[metric_keys.TIS_ROWS_WITHOUT_LOGPROBS] = float(sum(r.rollout_logprobs is None for r in rows))
    return out


def train_on_batch(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    rows: list[Row],
    algo: AlgorithmConfig,
    s: UpdateSettings,
    dist_info: DistInfo,
    reference: ReferencePolicy | None = None,
) -> dict[str, float]:
    """The whole update of one training step.

    ``rows`` is the full training batch in group order, identical on every rank. It is cut into
    mini-batches of ``rows_per_mini_batch`` episodes (one optimizer step each); each rank keeps its
    slice, computes pi_old for it with the weights that produced the batch (with one update epoch,
    the first mini-batch's pi_old is its training forward's log-probs, detached: same weights,
    same rows, same micro-batches) and pi_ref with ``reference`` (required when
    ``algo.use_kl_loss``), then runs ``update_epochs`` passes of optimizer steps (every rank with
    equally many rows).

    Returns: metrics averaged over the optimizer steps (``loss/*``, ``policy/*``, ``tis/*``,
        ``grad_norm``, ``lr``), plus ``policy/optimizer_steps``; the counts
        ``update/skipped_nonfinite_steps`` (with ``update/trailing_nonfinite_steps``) and
        ``tis/rows_without_logprobs`` (every row of the step) are totals, not means.
    """
    device, with_entropy = dist_info.device, algo.entropy_coef > 0
    scale = dp_loss_scale(dist_info.world_size, grads_averaged=s.sharded)
    if algo.use_kl_loss and reference is None:
        raise ValueError("algorithm.use_kl_loss needs the reference policy: pass reference=")
    # pi_old of every mini-batch with the weights that produced the batch, before any optimizer
    # step; the first one's comes from its own training forward when that runs on those weights.
    reuse_first = s.reuse_pi_old and s.update_epochs == 1
    local = [rank_rows(mini, dist_info, algo, s) if reuse_first and i == 0 else _with_pi_old(model, mini, algo, s, dist_info)
             for i, mini in enumerate(mini_batches(rows, s.rows_per_mini_batch))]
    if algo.use_kl_loss:  # log pi_ref of the same rows, once per step beside pi_old
        local = _with_pi_ref(reference, local, algo, s, dist_info)
    reported = reported_metric_keys(algo)
    history: list[dict[str, float]] = []
    for _ in range(s.update_epochs):
        for index, mini_rows in enumerate(local):  # one optimizer step
            denominators, forwarded, micro = _plan_step(mini_rows, algo, s, dist_info)
            reused = reuse_first and index == 0  # its forward is the only one on the batch's weights
            totals = {k: torch.zeros((), dtype=torch.float64, device=device) for k in reported.all}
            for mb_index, (mb, adv) in enumerate(micro):
                _require_grad_sync(model, s, last=mb_index == len(micro) - 1)
                mb = mb.to(device)
                logprobs, entropy, log_mass = forward_with_mass(model, mb, s.temperature, with_entropy, _autocast_dtype(s),
                                                                s.lm_head_chunk_tokens, s.pack_rows)
                out = compute_policy_loss(algo, _loss_inputs(mb, logprobs, entropy, log_mass, adv.to(device), reused),
                                          denominators)
                (out.loss * scale).backward()
                for k, v in out.metrics.items():  # still on the device: read once, after the all-reduce
                    totals[k] = totals[k] + v
            grad_norm, lr, skipped = _apply_gradients(model, optimizer, scheduler, s)
            history.append({**_step_metrics(totals, forwarded, denominators, algo, reported, device),
                            "grad_norm": grad_norm, "lr": lr, SKIPPED: skipped})
    return _mean_over_steps(history, rows, algo)
