"""The hf engine's lockstep greedy decoding: requests joining a running batch (:class:`GreedyStream`).

Every greedy call of :class:`~sleight.backends.hf.HFModel` runs through a stream, over the model's
forward passes and KV cache (:class:`~.cache_ops.CachedModel`): padded and masked on a slab cache
(:mod:`.kv_slab`), or ragged (:mod:`.ragged`). Each row's book-keeping is :mod:`.decode_state`'s.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sleight.backends.base import Generation, Hook, HookFn
from sleight.backends.cache_ops import (
    CachedModel,
    common_prefix_len,
    kv_template,
    layer_count,
    layer_kv,
    pad_columns,
    repeat_cache,
    select_cache,
)
from sleight.backends.decode_state import DecodeState, position_records
from sleight.backends.heap import release_freed_memory
from sleight.backends.ragged import Prefix, RaggedCache


@dataclass
class _Request:
    gid: int
    prompts: list[list[int]]
    max_new: int
    hook: HookFn | None
    forced: list[list[int]]
    row_offset: int
    priority: float = 0.0  # queued requests are admitted highest first (ties: first submitted first)
    joined: int = 0  # rows admitted so far (a ragged batch admits a request in pieces)
    shared: int = -1  # prompt tokens every row shares (-1: not computed yet)
    prefix: Prefix | None = None  # their keys and values, computed once, shared by every piece
    prefix_cache: Any = None  # the same as a slab cache, to fork for rows whose prompts differ after it

    @property
    def columns(self) -> int:
        """Cache columns a row may add past its prompt: its budget, its forced tokens, the prompt's last token."""
        return self.max_new + max(map(len, self.forced), default=0) + 1


_MIN_PIECE = 16  # a request's rows join a running ragged batch at least this many at a time (or all it has left)


class GreedyStream:
    """Lockstep greedy decoding with continuous batching: requests (a group of rows, a hook and a
    budget) join the running batch while it has room for all their rows, so the batch stays full as
    rows finish. Each request is prefilled on its own (the prefix its rows share once, forked) and
    its cache joins the batch's: the narrower one is padded on the left with masked columns, and
    columns that no live row attends to any more are dropped when a request joins. Iterating yields
    ``(request id, generations)`` as each request's last row ends.

    On a model whose attention is routed through :mod:`.ragged` the batch is ragged instead: each
    row keeps its own length, a request's rows join without padding (in pieces of at least
    ``_MIN_PIECE`` rows as rows retire, their shared prefix computed once and held once), each
    joining row fed its prompt's last token in the batch's next forward pass, and a retraction
    shortens its row. Otherwise joining a running batch needs a slab cache (:mod:`.kv_slab`), and
    other models run one request at a time. A request that joins an empty batch decodes exactly as
    a batch of its own would.
    """

    def __init__(self, model: CachedModel, *, top_k: int, live_rows: int, progress: Callable[[int], None] | None) -> None:
        self.model, self.top_k, self.live_rows, self.progress = model, top_k, max(1, live_rows), progress
        self.state = DecodeState(eos=model.eos_ids)
        self.pending: deque[_Request] = deque()
        self.finished: deque[tuple[int, list[Generation]]] = deque()
        self.left: dict[int, int] = {}  # request id -> its rows still decoding
        self.logits: torch.Tensor | None = None
        self.cache: Any = None
        self.mask: torch.Tensor | None = None
        self.requests = 0
        self.peak_rows = 0
        self.peak_columns = 0
        self.ragged = model.ragged
        self.steps = 0  # forward passes of the batch
        self.columns_live = 0  # key columns one layer's attention read, summed over steps (a shared prefix once)
        self.columns_masked = 0  # ... and masked tail columns it read
        self._col = 0  # the step count, as the cache column of DecodeState's book-keeping
        self._first: dict[int, int] = {}  # row -> the prompt token a joining row is fed first

    def submit(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: int,
        *,
        hook: Hook | HookFn | None = None,
        forced: Sequence[Sequence[int]] | None = None,
        row_offset: int = 0,
        priority: float = 0.0,
    ) -> int:
        """Queue a request; returns its id. The hook sees its rows as ``row_offset``, ``row_offset + 1``, ...
        Queued requests join highest ``priority`` first, a request already joining in pieces ahead
        of all (the scheduler admits long requests first, so the batch drains on short ones)."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("a request needs rows with non-empty prompts")
        forced = forced or [[] for _ in prompts]
        if len(forced) != len(prompts):
            raise ValueError("a request needs one forced list per row")
        gid = self.requests
        self.requests += 1
        self.pending.append(_Request(gid, [list(p) for p in prompts], int(max_new), hook, [list(f) for f in forced], row_offset, float(priority)))
        self.reprioritize(gid, priority)
        return gid

    def reprioritize(self, gid: int, priority: float) -> None:
        """A queued request's new priority (none if it has begun to join or is not queued)."""
        for k, req in enumerate(self.pending):
            if req.gid == gid and not req.joined:
                del self.pending[k]
                req.priority = float(priority)
                at = len(self.pending)
                while at > 0 and self.pending[at - 1].priority < req.priority and not self.pending[at - 1].joined:
                    at -= 1
                self.pending.insert(at, req)
                return

    def __iter__(self) -> GreedyStream:
        return self

    def __next__(self) -> tuple[int, list[Generation]]:
        while not self.finished:
            if self.ragged:
                if not self.state.alive and not self.pending:
                    raise StopIteration
                self._step_ragged()
                continue
            self._admit()
            if not self.state.alive:
                raise StopIteration
            self._step()
        return self.finished.popleft()

    @property
    def live(self) -> int:
        return len(self.state.alive)

    def _admit(self) -> None:
        """Move queued requests into the batch while their rows fit (any request into an empty batch)."""
        while self.pending:
            req = self.pending[0]
            busy = self.live
            if busy and (busy + len(req.prompts) > self.live_rows or not self.model.slab):
                return
            self.pending.popleft()
            with torch.inference_mode():
                logits, cache, mask = self.model.prefill(req.prompts)
            if busy:
                self._join(logits, cache, mask)
            else:
                self.logits, self.cache, self.mask = logits, cache, mask
            self.state.add(req.forced, req.max_new, req.hook, req.row_offset, group=req.gid)
            self.left[req.gid] = len(req.prompts)
            self.peak_rows = max(self.peak_rows, self.live)

    def _join(self, logits: torch.Tensor, cache: Any, mask: torch.Tensor) -> None:
        assert self.mask is not None and self.logits is not None
        live = self.mask.any(0)
        dead = int(live.nonzero()[0]) if bool(live.any()) else self.mask.shape[1]
        if dead:  # columns no live row attends to: gone before the batch widens
            self.cache.drop_left(dead)
            self.mask = self.mask[:, dead:]
            self.state.shift(dead)
        width, extra = self.mask.shape[1], mask.shape[1]
        if width < extra:
            self.cache.pad_left(extra - width)
            self.mask = torch.cat([self.mask.new_zeros((self.mask.shape[0], extra - width)), self.mask], 1)
            self.state.shift(width - extra)
        elif extra < width:
            cache.pad_left(width - extra)
            mask = torch.cat([mask.new_zeros((mask.shape[0], width - extra)), mask], 1)
        self.cache.stack(cache)
        self.mask = torch.cat([self.mask, mask], 0)
        self.logits = torch.cat([self.logits, logits], 0)

    @torch.inference_mode()
    def _step(self) -> None:
        """One token for every live row: record, choose (hooks, edits), retire, feed the batch."""
        assert self.logits is not None and self.mask is not None
        st, dev = self.state, self.model.device
        records = position_records(self.logits, self.top_k)
        proposals = records.greedy()  # one call for the batch, not one per row
        st.begin(records, col=self.mask.shape[1])
        for b, c in st.choose(proposals):
            self.mask[b, c] = 0
        fed = st.fed()
        self.mask = torch.cat([self.mask, torch.tensor(fed, dtype=torch.long, device=dev)[:, None]], 1)
        self.peak_columns = max(self.peak_columns, self.mask.shape[1])
        if self.progress:
            self.progress(sum(fed))
        before = list(st.alive)
        keep = st.retire()
        self._retired(before, keep)
        if not keep:
            self.logits = self.cache = self.mask = None
            return
        if len(keep) < self.mask.shape[0]:
            idx = torch.tensor(keep, device=dev)
            self.cache = select_cache(self.cache, idx)
            self.mask = self.mask[idx]
        feed = [st.rows[r].out[-1] for r in st.alive]
        pos = (self.mask.sum(-1) - 1)[:, None]
        logits, self.cache = self.model.forward(torch.tensor(feed, device=dev)[:, None], self.mask, pos, self.cache, last_only=True)
        self.logits = logits[:, -1, :]

    def _retired(self, before: list[int], keep: list[int]) -> None:
        """Count the rows that left the batch (``before``'s positions not in ``keep``); a request
        whose last row left is finished."""
        st = self.state
        for b in sorted(set(range(len(before))) - set(keep)):
            gid = st.rows[before[b]].group
            self.left[gid] -= 1
            if not self.left[gid]:
                del self.left[gid]
                self.finished.append((gid, [row.generation(self.top_k) for row in st.rows if row.group == gid]))
                release_freed_memory()  # its rows' buffers: else the heap fragments and the resident set grows

    # -- ragged batches ------------------------------------------------------------------------
    @torch.inference_mode()
    def _step_ragged(self) -> None:
        """One token for every live row (records, choices, retractions, retirements), then rows of
        queued requests join, then one forward pass feeds every row, joining ones included."""
        st, dev = self.state, self.model.device
        if st.alive:
            assert self.logits is not None and isinstance(self.cache, RaggedCache)
            records = position_records(self.logits, self.top_k)
            proposals = records.greedy()
            self._col += 1
            st.begin(records, col=self._col)
            for b, n in Counter(b for b, _ in st.choose(proposals)).items():
                self.cache.retract(b, n)  # the retracted tokens are the row's last ones: it gets shorter
            fed = st.fed()
            if self.progress:
                self.progress(sum(fed))
            before = list(st.alive)
            keep = st.retire()
            if not all(fed[b] for b in keep):
                raise RuntimeError("a live row accepted no token at this step")
            self._retired(before, keep)
            st.alive = [before[b] for b in self.cache.select(keep)]
        self._admit_ragged()
        if not st.alive:
            self.logits = self.cache = None
            return
        cache = self.cache
        assert isinstance(cache, RaggedCache)
        feed = [self._first.pop(r) if r in self._first else st.rows[r].out[-1] for r in st.alive]
        pos = cache.positions()
        cache.begin_step()
        live, masked = cache.columns_read()
        self.steps += 1
        self.columns_live += live
        self.columns_masked += masked
        self.peak_columns = max(self.peak_columns, max(pos) + 1)
        ids = torch.tensor(feed, device=dev)[:, None]
        logits, _ = self.model.forward(ids, None, torch.tensor(pos, device=dev)[:, None], cache, last_only=True)
        cache.end_step()
        self.logits = logits[:, -1, :]

    def _admit_ragged(self) -> None:
        """Rows of queued requests into the batch while there is room, a request in pieces of at
        least ``_MIN_PIECE`` rows (or all it has left; anything into an empty batch). Rows of
        one-row requests (and of requests sharing no prefix) that join together form one segment."""
        st = self.state
        plain: list[tuple[_Request, int, int, list[torch.Tensor], list[torch.Tensor], list[int]]] = []
        while self.pending:
            req = self.pending[0]
            busy = len(st.alive) + sum(len(p[5]) for p in plain)
            left = len(req.prompts) - req.joined
            take = min(left, self.live_rows - busy)
            if busy and (take <= 0 or (take < left and take < _MIN_PIECE)):
                break
            lo, hi = req.joined, req.joined + take
            own_k, own_v, lens = self._own_columns(req, lo, hi)
            if req.prefix is None or len(req.prompts) == 1:
                if req.prefix is not None:  # a row alone: its prompt is all its own
                    own_k = [torch.cat([p, o], -2) if o.shape[-2] else p for p, o in zip(req.prefix.keys, own_k)]
                    own_v = [torch.cat([p, o], -2) if o.shape[-2] else p for p, o in zip(req.prefix.values, own_v)]
                    lens = [n + req.prefix.length for n in lens]
                plain.append((req, lo, hi, own_k, own_v, lens))
            else:
                at = self._cache().add(req.prefix, lens, kv_template(self.model.model), own_k, own_v, rows=len(req.prompts) - lo, reserve=req.columns)
                self._join_rows(req, lo, hi, at)
            req.joined = hi
            if req.joined == len(req.prompts):
                self.pending.popleft()
                req.prefix = req.prefix_cache = None
        if plain:
            width = max(max(p[5]) for p in plain)
            pad = [pad_columns(p[3], width) for p in plain]
            padv = [pad_columns(p[4], width) for p in plain]
            n_layers = len(pad[0])
            self._cache().add(
                None,
                [n for p in plain for n in p[5]],
                kv_template(self.model.model),
                [torch.cat([k[layer] for k in pad], 0) for layer in range(n_layers)] if width else (),
                [torch.cat([v[layer] for v in padv], 0) for layer in range(n_layers)] if width else (),
                reserve=max(p[0].columns for p in plain),
            )
            for req, lo, hi, *_ in plain:
                self._join_rows(req, lo, hi)
        self.peak_rows = max(self.peak_rows, self.live)

    def _join_rows(self, req: _Request, lo: int, hi: int, at: int | None = None) -> None:
        """Rows ``lo:hi`` of ``req`` into the decode state, each to be fed its prompt's last token;
        ``at``: their batch position, where the cache put them (default: after every live row)."""
        if lo == 0:
            self.left[req.gid] = len(req.prompts)
        new = self.state.add(req.forced[lo:hi], req.max_new, req.hook, req.row_offset + lo, group=req.gid)
        alive = self.state.alive
        if at is not None and at < len(alive) - len(new):
            self.state.alive = alive[:at] + new + alive[at : len(alive) - len(new)]
        for r, prompt in zip(new, req.prompts[lo:hi]):
            self._first[r] = prompt[-1]

    def _cache(self) -> RaggedCache:
        if self.cache is None:
            self.cache = RaggedCache(layer_count(self.model.model))
        assert isinstance(self.cache, RaggedCache)
        return self.cache

    def _own_columns(self, req: _Request, lo: int, hi: int) -> tuple[list[torch.Tensor], list[torch.Tensor], list[int]]:
        """The keys and values of rows ``lo:hi``'s prompts after the request's shared prefix, but
        their last token (fed in the batch's next step): per layer ``(rows, kv_heads, columns,
        head_dim)``, row ``i``'s first ``lens[i]`` columns. The shared prefix is computed at batch 1
        on the request's first piece."""
        model, dev = self.model, self.model.device
        if req.shared < 0:
            req.shared = max(0, min(common_prefix_len(req.prompts), min(len(p) for p in req.prompts) - 1))
            if req.shared:
                ids = torch.tensor([req.prompts[0][: req.shared]], device=dev)
                _, pc = model.forward(ids, torch.ones_like(ids), torch.arange(req.shared, device=dev)[None], last_only=True)
                req.prefix_cache = pc
                kv = [layer_kv(layer) for layer in pc.layers]
                req.prefix = Prefix([k.clone() for k, _ in kv], [v.clone() for _, v in kv])
        rows = [p[req.shared : -1] for p in req.prompts[lo:hi]]
        lens = [len(r) for r in rows]
        n_layers = layer_count(self.model.model)
        if not any(lens):
            t = kv_template(self.model.model)
            empty = t.new_zeros((hi - lo, *t.shape[1:]))
            return [empty] * n_layers, [empty] * n_layers, lens
        # Rows whose prompts differ after the shared prefix: their own tokens, left-padded, over a fork of it.
        take = hi - lo
        fork = repeat_cache(req.prefix_cache, take) if req.prefix_cache is not None else None
        tid, tmask, _ = model.padded(rows, "left")
        pos = req.shared + (tmask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([torch.ones((take, req.shared), dtype=torch.long, device=dev), tmask], 1)
        _, cache = model.forward(tid, mask, pos, fork, last_only=True)
        width = tid.shape[1]
        own_k, own_v = [], []
        for layer in cache.layers:
            k, v = (t[:, :, req.shared :] for t in layer_kv(layer))
            ok, ov = k.new_zeros(k.shape), v.new_zeros(v.shape)
            for i, n in enumerate(lens):
                if n:
                    ok[i, :, :n] = k[i, :, width - n :]
                    ov[i, :, :n] = v[i, :, width - n :]
            own_k.append(ok)
            own_v.append(ov)
        return own_k, own_v, lens
