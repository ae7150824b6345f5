"""Ragged lockstep batches: every row of a decode keeps its own length, and attention reads only
the row's live columns (issue 28).

A rectangular KV cache makes a joining request pad to the oldest row's width and leaves a hook's
retracted tokens behind as masked columns; transformers hands any mask to SDPA only after copying
every key and value once per query head (``repeat_kv``), so a batch with one hole a row runs a
several times slower step. Here:

- the batch is a list of *segments*, each a buffer ``(rows, kv_heads, capacity, head_dim)`` per
  layer for the columns its rows own, row ``i`` filling its first ``lens[i]`` columns;
- a segment may name a :class:`Prefix`, the keys and values of a prompt prefix its rows share,
  held once (the rows of one question fork it; pieces of one request admitted at different steps
  name the same object);
- a decode step writes each row's new column at its own length; a retraction shortens the row
  (the retracted tokens are always its last ones), so nothing is ever masked in the middle;
- attention (:func:`ragged_attention`, registered through transformers' ``AttentionInterface``)
  runs per segment: SDPA over the segment's own columns (a mask only where its rows' lengths
  differ, over their tails), SDPA of all the segment's queries against the shared prefix at once
  (the prefix read once for all rows, not once a row), and the two merged by their log-sum-exps.

Rows retire by moving the segment's last row into the hole (one row copied, not every row after
it); the batch order is the segments' rows in order, and the caller takes the new order from
:meth:`RaggedCache.select`. The numbers differ from one SDPA call over the concatenated columns
only by float32 rounding (the merge, the kernel's blocking): ~1e-7 on an attention output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache

NAME = "sleight_ragged"
_SPARE = 128  # columns reserved past what is needed when a segment's buffer grows
_ZERO_AHEAD = 64  # columns made finite ahead of the widest row, so a buffer's pages are touched as rows grow
_MERGE_SPAN = 32  # a piece joins its request's segment while that segment's rows are at most this many columns longer


@dataclass(eq=False)
class Prefix:
    """A prompt prefix's keys and values, per layer ``(1, kv_heads, length, head_dim)``, held once."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[-2]) if self.keys else 0


@dataclass(eq=False)
class Segment:
    """Rows that joined together: their own columns in one buffer per layer, and the prefix they share."""

    prefix: Prefix | None
    keys: list[torch.Tensor]  # per layer (capacity rows, kv_heads, capacity columns, head_dim)
    values: list[torch.Tensor]
    lens: list[int]  # own columns per live row, in batch order
    mask: torch.Tensor | None = None  # this step's additive mask over the own columns (None: no tails)
    width: int = 0  # this step's own columns read (the longest row's, with its new column)
    finite: int = 0  # columns ``[0, finite)`` hold finite numbers in every live row: a masked column must not be NaN
    index: torch.Tensor | None = None  # this step's row numbers, for the per-row column writes

    @property
    def size(self) -> int:
        return len(self.lens)


def _lse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output ``(b, h, q, d)`` and its log-sum-exp ``(b, h, q)``, keys with fewer heads
    than queries read once per head group: the group's query heads become query positions of its
    key head (``repeat_kv``'s order), so each key and value is read once, not once a query head
    (~25 % of a decode step's attention on 2 cores). The CPU's fused kernel where it is, else the
    same formula spelled out. ``mask`` broadcasts over heads and query positions."""
    b, h, n, d = q.shape
    kv = k.shape[1]
    qg = q.reshape(b, kv, (h // kv) * n, d)
    if q.device.type == "cpu" and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(qg, k, v, 0.0, False, attn_mask=mask, scale=scale)
        return out.reshape(b, h, n, d), lse.reshape(b, h, n)
    s = torch.matmul(qg.float(), k.float().transpose(-1, -2)) * (scale if scale is not None else d**-0.5)
    if mask is not None:
        s = s + mask.float()
    lse = torch.logsumexp(s, dim=-1)
    out = torch.matmul(torch.softmax(s, dim=-1), v.float()).to(q.dtype)
    return out.reshape(b, h, n, d), lse.reshape(b, h, n)


def merge_attention(first: tuple[torch.Tensor, torch.Tensor], second: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Softmax attention over the union of two disjoint key sets, from each set's output and
    log-sum-exp: the first set's share of the weight is sigmoid(lse1 - lse2)."""
    (a, la), (b, lb) = first, second
    w = torch.sigmoid(la.float() - lb.float())[..., None]
    return torch.lerp(b.float(), a.float(), w).to(a.dtype)


class RaggedCache(Cache):
    """The KV cache of a ragged lockstep batch (see the module's docstring). transformers sees a
    cache whose ``update`` stores the step's column; :func:`ragged_attention` reads the segments."""

    def __init__(self, layers: int) -> None:
        super().__init__(layers=[])
        self.n_layers = layers
        self.segments: list[Segment] = []

    # -- what transformers asks a cache ------------------------------------------------------
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write each row's new column (one query position a row) at its own length."""
        if key_states.shape[-2] != 1:
            raise ValueError("a ragged batch decodes one token a row per step")
        at = 0
        for seg in self.segments:
            m = seg.size
            assert seg.index is not None, "begin_step() before the forward pass"
            cols = seg.index[1]
            seg.keys[layer_idx][seg.index[0], :, cols] = key_states[at : at + m, :, 0]
            seg.values[layer_idx][seg.index[0], :, cols] = value_states[at : at + m, :, 0]
            at += m
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
        return query_length, 0

    @property
    def is_compileable(self) -> bool:
        return False

    # -- the batch -----------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return sum(s.size for s in self.segments)

    def positions(self) -> list[int]:
        """Each row's position for the token it is fed next: the prefix and its own columns before it."""
        return [(s.prefix.length if s.prefix else 0) + n for s in self.segments for n in s.lens]

    def add(
        self,
        prefix: Prefix | None,
        lens: Sequence[int],
        template: torch.Tensor,
        own_k: Sequence[torch.Tensor] = (),
        own_v: Sequence[torch.Tensor] = (),
        *,
        rows: int | None = None,
        reserve: int = _SPARE,
    ) -> int:
        """New rows: ``prefix`` shared (or None), and per layer ``own_k``/``own_v`` ``(rows, kv_heads,
        columns, head_dim)`` whose first ``lens[i]`` columns row ``i`` owns (none given: no own columns
        yet). ``template``: a key tensor of the model's (kv_heads, head_dim, dtype, device). They join
        the last segment sharing ``prefix`` where it has room for them and its rows are at most
        ``_MERGE_SPAN`` columns longer (pieces of one request decode as one segment: one attention
        call instead of one a piece, a few masked tail columns instead); else they form a new segment
        at the end, with room for ``rows`` rows (default: these) and ``reserve`` columns past the
        longest (a request's budget: its buffer then never grows and is never copied). The buffer is
        made finite only ahead of its widest row (:meth:`begin_step`), so its untouched pages cost
        nothing. Returns the batch position of the first new row (its rows follow in order)."""
        m = len(lens)
        seg = next((g for g in reversed(self.segments) if prefix is not None and g.prefix is prefix), None)
        if seg is not None and seg.size + m <= seg.keys[0].shape[0] and max(lens, default=0) <= seg.keys[0].shape[-2]:
            if max(seg.lens) - min(lens, default=0) <= _MERGE_SPAN:
                at = sum(g.size for g in self.segments[: self.segments.index(seg)]) + seg.size
                lo = seg.size
                have = int(own_k[0].shape[-2]) if own_k else 0
                self._make_finite(seg, have)
                for layer in range(self.n_layers):
                    for t, own in ((seg.keys[layer], own_k), (seg.values[layer], own_v)):
                        if have:
                            t[lo : lo + m, :, :have] = own[layer]
                        t[lo : lo + m, :, have : seg.finite].zero_()  # the new rows' columns the others hold finite
                seg.lens.extend(lens)
                return at
        cap = max(lens, default=0) + max(1, reserve)
        shape = (max(m, rows or m), template.shape[1], cap, template.shape[-1])
        keys = [template.new_empty(shape) for _ in range(self.n_layers)]
        values = [template.new_empty(shape) for _ in range(self.n_layers)]
        seg = Segment(prefix, keys, values, list(lens))
        self._make_finite(seg, min(cap, max(lens, default=0) + 1 + _ZERO_AHEAD))
        if own_k:
            for layer in range(self.n_layers):
                have = int(own_k[layer].shape[-2])
                keys[layer][:m, :, :have] = own_k[layer]
                values[layer][:m, :, :have] = own_v[layer]
        at = self.rows
        self.segments.append(seg)
        return at

    @staticmethod
    def _make_finite(seg: Segment, upto: int) -> None:
        """Zero columns ``[seg.finite, upto)`` of the live rows (a row joining later zeroes its own
        ``[.., finite)`` as it joins; a retired row's slot is taken over with the stale, finite,
        columns of the row it held). A masked column's weight is exactly 0, but 0 times a NaN left in
        fresh memory is NaN: a column read must hold a number. Only live rows: a segment has room
        for its whole request, and most of a late piece's slots are never filled."""
        if upto > seg.finite:
            for t in (*seg.keys, *seg.values):
                t[: seg.size, :, seg.finite : upto].zero_()
            seg.finite = upto

    def retract(self, row: int, n: int) -> None:
        """Row ``row`` (batch position) withdrew its last ``n`` cached columns."""
        seg, i = self._locate(row)
        if n > seg.lens[i]:
            raise RuntimeError(f"retracting {n} columns from a row that owns {seg.lens[i]}")
        seg.lens[i] -= n

    def select(self, keep: Sequence[int]) -> list[int]:
        """Keep the rows at batch positions ``keep``. A segment's hole is filled by its last live
        row (one row copied, not every row after it); returns the kept batch positions in their
        new batch order."""
        kept = set(keep)
        order: list[int] = []
        start = 0
        segments = []
        for seg in self.segments:
            size = seg.size
            alive = [s for s in range(size) if start + s in kept]
            if alive:
                moved = _fill_order(alive, size)
                if len(alive) < size:
                    self._compact(seg, moved)
                order.extend(start + s for s in moved)
                segments.append(seg)
            start += size
        self.segments = segments
        return order

    @staticmethod
    def _compact(seg: Segment, order: list[int]) -> None:
        """Row ``order[i]`` of the segment becomes row ``i`` (only rows filling holes move)."""
        for new, old in enumerate(order):
            if new != old:
                n = seg.lens[old]
                for t in (*seg.keys, *seg.values):
                    t[new, :, :n] = t[old, :, :n]
        seg.lens = [seg.lens[o] for o in order]

    def _locate(self, row: int) -> tuple[Segment, int]:
        for seg in self.segments:
            if row < seg.size:
                return seg, row
            row -= seg.size
        raise IndexError(row)

    def begin_step(self) -> None:
        """Before a forward pass: room for each row's new column, and each segment's mask (None
        when its rows are of one length)."""
        for seg in self.segments:
            need = max(seg.lens) + 1
            cap = int(seg.keys[0].shape[-2])
            if need > cap:
                grow = need + max(_SPARE, cap // 4)
                for store in (seg.keys, seg.values):
                    for layer, t in enumerate(store):
                        bigger = t.new_empty((t.shape[0], t.shape[1], grow, t.shape[-1]))
                        bigger[:, :, :cap] = t
                        store[layer] = bigger
            if need > seg.finite:
                self._make_finite(seg, min(int(seg.keys[0].shape[-2]), need + _ZERO_AHEAD))
            seg.width = need
            dev = seg.keys[0].device
            seg.index = torch.stack([torch.arange(seg.size, device=dev), torch.tensor(seg.lens, device=dev)])
            if min(seg.lens) + 1 == need:
                seg.mask = None
            else:
                lens = torch.tensor(seg.lens, device=seg.keys[0].device)[:, None] + 1
                cols = torch.arange(need, device=lens.device)[None, :]
                dtype = seg.keys[0].dtype
                seg.mask = torch.zeros((seg.size, 1, 1, need), dtype=dtype, device=lens.device).masked_fill(
                    (cols >= lens)[:, None, None, :], float("-inf")
                )

    def end_step(self) -> None:
        """After a forward pass: every row owns the column it was fed."""
        for seg in self.segments:
            seg.lens = [n + 1 for n in seg.lens]

    def columns_read(self) -> tuple[int, int]:
        """(live, masked) key columns one layer's attention reads this step, over all rows: a
        shared prefix counts once per segment."""
        live = masked = 0
        for seg in self.segments:
            own = sum(n + 1 for n in seg.lens)
            live += own + (seg.prefix.length if seg.prefix else 0)
            masked += seg.size * max(seg.lens, default=-1) + seg.size - own
        return live, masked


def ragged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *args: Any,
    ragged: RaggedCache | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, unchanged, unless the forward pass carries a ``ragged``
    cache: then each segment's rows attend to their own live columns and their shared prefix."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if ragged is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, *args, **kwargs)
    layer = int(module.layer_idx)  # type: ignore[arg-type]
    scale = kwargs.get("scaling")
    outs = []
    at = 0
    for seg in ragged.segments:
        q = query[at : at + seg.size]
        at += seg.size
        k = seg.keys[layer][: seg.size, :, : seg.width]
        v = seg.values[layer][: seg.size, :, : seg.width]
        if seg.prefix is None:
            if seg.mask is None:
                outs.append(F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True))
            else:
                outs.append(F.scaled_dot_product_attention(q, k, v, attn_mask=seg.mask, scale=scale, enable_gqa=True))
            continue
        own = _lse_attention(q, k, v, seg.mask, scale)
        # every row's query against the prefix at once: the rows become query positions of one sequence
        pre_o, pre_lse = _lse_attention(q.transpose(0, 2), seg.prefix.keys[layer], seg.prefix.values[layer], None, scale)
        outs.append(merge_attention(own, (pre_o.transpose(0, 2), pre_lse.transpose(0, 2))))
    out = outs[0] if len(outs) == 1 else torch.cat(outs, 0)
    return out.transpose(1, 2).contiguous(), None


def _fill_order(alive: list[int], n: int) -> list[int]:
    """Slots ``alive`` (ascending) of ``n``, packed into the first ``len(alive)``: the old slot of
    each new one, a hole taking the last live slot past the new size."""
    size = len(alive)
    live = set(alive)
    tail = [s for s in alive if s >= size]
    slot = list(range(size))
    for hole in range(size):
        if hole not in live:
            slot[hole] = tail.pop()
    return slot


def register(model: torch.nn.Module) -> bool:
    """Route ``model``'s attention through :func:`ragged_attention` (SDPA itself for every call
    without a ragged cache, with SDPA's masks). Only for a model that runs transformers' SDPA
    attention; returns whether it was routed."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) not in ("sdpa", NAME):
        return False
    AttentionInterface.register(NAME, ragged_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    set_impl: Callable[[str], None] | None = getattr(model, "set_attn_implementation", None)
    if set_impl is None:
        return False
    set_impl(NAME)
    return getattr(config, "_attn_implementation", None) == NAME
