"""Padding-free forwards (``model.pack_rows``): a micro-batch's rows laid end to end, each row's
``position_ids`` restarting at 0, and no attention mask, so that transformers builds a
block-causal mask from the positions (``masking_utils.find_packed_sequence_indices``; the
flash-attention path reads the same positions as variable-length sequences). A row attends only to
itself, so each row's log-probs are those of its own padded forward, up to float summation order.

Two layouts (:data:`PackMode`):
- ``one_sequence``: every row of the micro-batch in one sequence, no padding at all. For attention
  kernels that skip the blocks between sequences (flash attention, flex attention): their cost is
  each row's own causal square.
- ``smallest_square``: for kernels that compute the whole masked square of each sequence (sdpa,
  eager; a padded micro-batch's n x L x L too), the one sequence when its square is no larger than
  that of the rows first-fit (longest first) into sequences of the micro-batch's longest row (each
  tail padded), else those. The forward then never holds more tokens nor a larger attention square
  than the padded one.

Only the forward's layout changes: the log-probs, entropies and kept-set masses come back on the
micro-batch's (n, L-1) grid (:meth:`PackedRows.unpack`), so the loss, its masks and its
denominators (counted from the rows, never from the layout) are untouched. The LM head reads only
each row's positions from its first response column on (as ``logits_to_keep`` does unpacked), the
chunked head included (``trainer.step.lm_head``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from swerl.errors import ConfigError
from swerl.rl.logprobs import next_token_logprobs, next_token_logprobs_on_support
from swerl.rl.support import NO_TOKEN
from swerl.trainer.policy.lora import hf_module
from swerl.trainer.step.batch import MicroBatch
from swerl.trainer.step.lm_head import ChunkedHeadCall, forward_chunk_tokens, head_swapped, output_head

PackMode = Literal["off", "one_sequence", "smallest_square"]
"""How a micro-batch's rows are forwarded: padded to its longest row (``off``) or packed (module docstring)."""

VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3", "flex_attention")
"""Attention implementations that skip the blocks between packed sequences: one sequence per micro-batch."""
DENSE_ATTENTION = ("sdpa", "eager")
"""Attention implementations that compute the whole masked square: ``smallest_square``."""


def packing_refusal(model: torch.nn.Module) -> str | None:
    """Why ``model``'s forward would not keep packed rows apart, or None when it does: a transformers
    decoder whose attention implementation is one of :data:`VARLEN_ATTENTION` + :data:`DENSE_ATTENTION`
    and whose modeling code builds its masks with ``transformers.masking_utils`` (Llama, Qwen2/3,
    Mistral, ... : the functions that read packed ``position_ids``)."""
    hf = hf_module(model)
    config = getattr(hf, "config", None)
    if config is None:
        return f"{type(hf).__name__} is not a transformers model"
    attention = getattr(config, "_attn_implementation", None)
    if attention not in VARLEN_ATTENTION + DENSE_ATTENTION:
        return f"its attention implementation {attention!r} does not read packed position_ids"
    if not getattr(config, "is_causal", True):
        return "it is not a causal decoder"
    if not any(hasattr(sys.modules.get(cls.__module__), "create_causal_mask") for cls in type(hf).__mro__):
        return f"{type(hf).__name__} does not build its masks with transformers.masking_utils"
    return None


def pack_choice(model: torch.nn.Module, setting: Literal["auto"] | bool, micro_batch_size: int) -> tuple[PackMode, str]:
    """``model.pack_rows`` resolved for ``model``: the layout and the words that say why.

    auto: packed where :func:`packing_refusal` finds nothing and a micro-batch holds several rows
    (``loop.micro_batch_size`` > 1); true: packed, or refused; false: off.
    Raises: ConfigError for ``true`` on a model that :func:`packing_refusal` refuses.
    """
    if setting is False:
        return "off", "off (model.pack_rows: false)"
    refusal = packing_refusal(model)
    if refusal is not None and setting is True:
        raise ConfigError(f"model.pack_rows: true, but this model cannot pack rows: {refusal}; "
                          "set model.pack_rows: auto or false")
    if refusal is not None:
        return "off", f"off (model.pack_rows: auto): {refusal}"
    if setting == "auto" and micro_batch_size == 1:
        return "off", "off (model.pack_rows: auto): loop.micro_batch_size 1 forwards one row at a time, no padding"
    attention = hf_module(model).config._attn_implementation
    mode: PackMode = "one_sequence" if attention in VARLEN_ATTENTION else "smallest_square"
    words = ("one sequence per micro-batch" if mode == "one_sequence" else "one sequence per micro-batch, or "
             "sequences of its longest row where their attention square is smaller")
    return mode, f"rows packed without padding between them: {words} ({attention} attention; model.pack_rows: {setting})"


@dataclass(frozen=True)
class PackedRows:
    """The rows of a micro-batch laid end to end in m sequences of S tokens.

    Attributes:
        input_ids: (m, S) int64; a sequence's tail past its rows holds id 0 (positions restarting
            at 0: a block of its own that no row attends to).
        position_ids: (m, S) int64, each row's 0..len-1.
        kept: (K,) int64 flat indices (into m * S) of the positions the LM head reads: row by row,
            its first response column to its last token.
        kept_ids: (1, K) int64 ids at ``kept``; within a row, position j's target is ``kept_ids[0, j+1]``.
        grid_rows, grid_cols: (K-1,) int64 cell of the (n, L-1) grid that head position j fills.
        predicts: (K-1,) bool, False at a row's last token (its "target" would be the next row's).
        grid_shape: (n, L-1).
    """

    input_ids: Tensor
    position_ids: Tensor
    kept: Tensor
    kept_ids: Tensor
    grid_rows: Tensor
    grid_cols: Tensor
    predicts: Tensor
    grid_shape: tuple[int, int]

    @property
    def num_tokens(self) -> int:
        """Tokens the packed forward runs (m * S), padding included."""
        return self.input_ids.numel()

    def unpack(self, values: Tensor) -> Tensor:
        """(1, K-1) head outputs -> the (n, L-1) grid (0 where a row has no response column; differentiable)."""
        take = self.predicts.nonzero().squeeze(1)
        grid = values.new_zeros(self.grid_shape)
        return grid.index_put((self.grid_rows[take], self.grid_cols[take]), values[0, take])

    def support_of(self, support: Tensor | None) -> Tensor | None:
        """(n, L-1, K) kept sets -> (1, K-1, K) at the head's positions (``NO_TOKEN`` where nothing is predicted)."""
        if support is None:
            return None
        cols = self.grid_cols.clamp(max=self.grid_shape[1] - 1)
        picked = support[self.grid_rows, cols].masked_fill(~self.predicts[:, None], NO_TOKEN)
        return picked[None]


def first_fit(lengths: list[int], capacity: int) -> list[list[int]]:
    """Row indices grouped into sequences of at most ``capacity`` tokens, longest row first, each
    into the first sequence it fits (first-fit decreasing; a row longer than ``capacity`` alone)."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        spot = next((b for b, free in enumerate(room) if lengths[i] <= free), None)
        if spot is None:
            bins.append([])
            room.append(capacity)
            spot = len(bins) - 1
        bins[spot].append(i)
        room[spot] -= lengths[i]
    return bins


def sequences_of(lengths: list[int], mode: PackMode) -> list[list[int]]:
    """Row indices of each packed sequence of rows of ``lengths`` tokens (module docstring)."""
    total = sum(lengths)
    if mode == "one_sequence":
        return [list(range(len(lengths)))]
    bins = first_fit(lengths, max(lengths))
    return [list(range(len(lengths)))] if total * total <= len(bins) * max(lengths) ** 2 else bins


def pack_micro_batch(mb: MicroBatch, mode: PackMode) -> PackedRows:
    """Lay ``mb``'s rows out as ``mode`` says (``one_sequence`` or ``smallest_square``), on ``mb``'s device."""
    lengths = [int(x) for x in mb.attention_mask.sum(1).tolist()]
    starts = [int(x) for x in mb.response_starts.tolist()]
    bins = sequences_of(lengths, mode)
    width = max(sum(lengths[i] for i in b) for b in bins)
    device = mb.input_ids.device
    ids = torch.zeros((len(bins), width), dtype=torch.int64, device=device)
    positions = torch.zeros_like(ids)
    offset = [0] * len(lengths)
    for b, members in enumerate(bins):
        at = 0
        for i in members:
            ids[b, at:at + lengths[i]] = mb.input_ids[i, :lengths[i]]
            positions[b, at:at + lengths[i]] = torch.arange(lengths[i], device=device)
            offset[i], at = b * width + at, at + lengths[i]
        positions[b, at:] = torch.arange(width - at, device=device)
    cols = [torch.arange(s, n, device=device) for s, n in zip(starts, lengths)]
    kept = torch.cat([offset[i] + c for i, c in enumerate(cols)])
    rows = torch.cat([torch.full_like(c, i) for i, c in enumerate(cols)])
    col = torch.cat(cols)
    last = torch.tensor(lengths, device=device)[rows] - 1
    return PackedRows(input_ids=ids, position_ids=positions, kept=kept, kept_ids=ids.flatten()[kept][None],
                      grid_rows=rows[:-1], grid_cols=col[:-1], predicts=(col < last)[:-1],
                      grid_shape=(len(lengths), mb.input_ids.shape[1] - 1))


def packs_rows(mb: MicroBatch, mode: PackMode) -> bool:
    """True when ``mode`` forwards ``mb`` in fewer sequences than rows (else the padded forward is the same work)."""
    if mode == "off" or mb.input_ids.shape[0] < 2 or bool(mb.attention_mask.all()):
        return False
    lengths = [int(x) for x in mb.attention_mask.sum(1).tolist()]
    return len(sequences_of(lengths, mode)) < len(lengths)


class _KeptPositionsHead(torch.nn.Module):
    """Stands in for the LM head during one packed forward: (m, S, H) hidden -> ``head`` of the
    (1, K, H) hidden states at the kept positions."""

    def __init__(self, head: torch.nn.Module, kept: Tensor) -> None:
        super().__init__()
        self._head = (head,)  # a tuple: not registered, the model's parameters do not change
        self.kept = kept

    def forward(self, hidden: Tensor) -> Tensor:
        return self._head[0](hidden.reshape(-1, hidden.shape[-1])[self.kept][None])


def packed_forward(model: torch.nn.Module, mb: MicroBatch, temperature: float, with_entropy: bool,
                   chunk_setting: int | None, mode: PackMode) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``trainer.step.update.forward_with_mass`` with ``mb``'s rows packed (``mode``), the LM head
    chunked as ``chunk_setting`` says (None = auto); call it under the forward's autocast.

    Returns: (n, L-1) float32 log-probs, entropies or None, log S_t or None (``mb.support`` None);
        0 outside each row's columns from its first response column on.
    Raises: ConfigError as ``trainer.step.lm_head.chunked_forward``.
    """
    packed = pack_micro_batch(mb, mode)
    support = packed.support_of(mb.support)
    chunk = forward_chunk_tokens(model, chunk_setting, 1, packed.kept.numel())
    head = hf_module(model).get_output_embeddings()
    if chunk:
        head = ChunkedHeadCall(output_head(model), packed.kept_ids, support, temperature, chunk, with_entropy,
                               mb.replay_support)
    with head_swapped(model, _KeptPositionsHead(head, packed.kept)):
        out = model(input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=None,
                    use_cache=False, logits_to_keep=0)
    if chunk:
        if head.result is None or out.logits is not head.result[0]:
            raise ConfigError(f"model.lm_head_chunk_tokens: {type(hf_module(model)).__name__} changes its LM head's "
                              "output (e.g. soft-capping), so the head cannot be chunked: set model.lm_head_chunk_tokens: 0")
        values = head.result
    elif support is None:
        values = (*next_token_logprobs(out.logits, packed.kept_ids, temperature, with_entropy=with_entropy), None)
    else:
        values = next_token_logprobs_on_support(out.logits, packed.kept_ids, support, temperature,
                                                replay=mb.replay_support, with_entropy=with_entropy)
    return tuple(None if v is None else packed.unpack(v) for v in values)
