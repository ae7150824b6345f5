"""Ragged lockstep batches (sleight.backends.ragged): rows of their own lengths, attention over live
columns only, a shared prefix held once. The layout and the attention on hand-made tensors, then the
hf engine's stream on the bundled model: requests joining in pieces, retractions shortening rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sleight.backends import Edit
from sleight.backends.decode_stream import GreedyStream
from sleight.backends.ragged import Prefix, RaggedCache, _fill_order, merge_attention, ragged_attention
from tolerances import ENTROPY_ATOL, LOGPROB_ATOL

H, KV, D, LAYERS = 6, 2, 8, 2


class _Module(torch.nn.Module):
    def __init__(self, layer: int) -> None:
        super().__init__()
        self.layer_idx = layer


def _rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _reference(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.Tensor:
    """Each row alone: one SDPA call over its whole (prefix + own) columns."""
    return torch.cat([F.scaled_dot_product_attention(q[i : i + 1], k[None], v[None], enable_gqa=True) for i, (k, v) in enumerate(zip(keys, values))])


def test_fill_order_moves_only_rows_that_fill_holes():
    assert _fill_order([0, 1, 2], 3) == [0, 1, 2]
    assert _fill_order([1, 2, 3], 4) == [3, 1, 2]
    assert _fill_order([0, 2, 5], 6) == [0, 5, 2]
    assert _fill_order([4], 5) == [4]


def test_ragged_attention_equals_each_row_alone():
    """A prefix segment (rows of different lengths, one after a retraction), a plain one, and a
    second segment of the same prefix after it: every row's output is its own attention over its
    live columns, to float32 rounding."""
    cache = RaggedCache(LAYERS)
    prefix = Prefix([_rand(1, KV, 5, D, seed=10 + i) for i in range(LAYERS)], [_rand(1, KV, 5, D, seed=20 + i) for i in range(LAYERS)])
    own = [_rand(3, KV, 4, D, seed=30 + i) for i in range(LAYERS)]
    ownv = [_rand(3, KV, 4, D, seed=40 + i) for i in range(LAYERS)]
    cache.add(prefix, [4, 2, 3], own[0], own, ownv)
    plain = [_rand(2, KV, 6, D, seed=50 + i) for i in range(LAYERS)]
    plainv = [_rand(2, KV, 6, D, seed=60 + i) for i in range(LAYERS)]
    cache.add(None, [6, 3], plain[0], plain, plainv)
    late = [_rand(1, KV, 2, D, seed=80 + i) for i in range(LAYERS)]
    latev = [_rand(1, KV, 2, D, seed=90 + i) for i in range(LAYERS)]
    assert cache.add(prefix, [2], late[0], late, latev) == 5  # the first segment is full: a new one at the end
    assert len(cache.segments) == 3
    cache.retract(0, 1)  # row 0 withdraws its last column: 3 left
    assert cache.positions() == [5 + 3, 5 + 2, 5 + 3, 6, 3, 5 + 2]
    cache.begin_step()
    new_k, new_v = _rand(6, KV, 1, D, seed=70), _rand(6, KV, 1, D, seed=71)
    q = _rand(6, H, 1, D, seed=72)
    cache.update(new_k, new_v, 0)
    out, _ = ragged_attention(_Module(0), q, new_k, new_v, None, ragged=cache)
    lens = [3, 2, 3]
    keys = [torch.cat([prefix.keys[0][0], own[0][i, :, :n], new_k[i]], -2) for i, n in enumerate(lens)]
    values = [torch.cat([prefix.values[0][0], ownv[0][i, :, :n], new_v[i]], -2) for i, n in enumerate(lens)]
    keys += [torch.cat([plain[0][i, :, :n], new_k[3 + i]], -2) for i, n in enumerate([6, 3])]
    values += [torch.cat([plainv[0][i, :, :n], new_v[3 + i]], -2) for i, n in enumerate([6, 3])]
    keys.append(torch.cat([prefix.keys[0][0], late[0][0], new_k[5]], -2))
    values.append(torch.cat([prefix.values[0][0], latev[0][0], new_v[5]], -2))
    torch.testing.assert_close(out.transpose(1, 2), _reference(q, keys, values))
    cache.end_step()
    assert cache.positions() == [9, 8, 9, 7, 4, 8]
    # what the next step reads: the prefix once a segment, each row's own columns and new one, the tails masked
    assert cache.columns_read() == (5 + (5 + 4 + 5) + (8 + 5) + (5 + 4), (5 - 4) + (8 - 5))


def test_select_fills_holes_from_the_tail_and_keeps_each_rows_columns():
    cache = RaggedCache(1)
    k = torch.arange(4 * 1 * 3 * 1, dtype=torch.float32).reshape(4, 1, 3, 1)
    cache.add(None, [3, 1, 2, 3], k, [k], [k + 100])
    order = cache.select([0, 2, 3])  # row 1 retires: row 3 moves into its place
    assert order == [0, 3, 2]
    seg = cache.segments[0]
    assert seg.lens == [3, 3, 2]
    assert torch.equal(seg.keys[0][1, :, :3], k[3]) and torch.equal(seg.values[0][1, :, :3], k[3] + 100)
    assert cache.select([]) == [] and cache.segments == []


@pytest.mark.parametrize("reserve", [200, 2])
def test_fresh_memory_is_never_read_as_a_masked_column(reserve):
    """A segment's buffer is allocated for its budget up front (``reserve``; 2: it grows as rows
    do) and made finite only ahead of its live rows. Whatever fresh memory holds past that (NaN
    here, in the spare row slot too) is never read: a masked tail column weighs exactly 0, and
    0 * NaN would poison the row; a row joining at step 10 zeroes its own columns as it joins."""
    cache = RaggedCache(1)
    prefix = Prefix([_rand(1, KV, 4, D, seed=82)], [_rand(1, KV, 4, D, seed=83)])
    own, ownv = _rand(2, KV, 3, D, seed=80), _rand(2, KV, 3, D, seed=81)
    cache.add(prefix, [3, 1], own, [own], [ownv], rows=3, reserve=reserve)
    seg = cache.segments[0]
    assert seg.keys[0].shape[:3] == (3, KV, 3 + reserve) and seg.finite == min(3 + reserve, 3 + 1 + 64)
    for t in (seg.keys[0], seg.values[0]):
        t[:, :, seg.finite :] = float("nan")
        t[2:] = float("nan")
    keys = [[prefix.keys[0][0], own[i, :, :n]] for i, n in enumerate([3, 1])]
    values = [[prefix.values[0][0], ownv[i, :, :n]] for i, n in enumerate([3, 1])]
    for step in range(70):
        if step == 10:
            late, latev = _rand(1, KV, 2, D, seed=84), _rand(1, KV, 2, D, seed=85)
            assert cache.add(prefix, [2], late, [late], [latev]) == 2 and len(cache.segments) == 1  # joined
            keys.append([prefix.keys[0][0], late[0]])
            values.append([prefix.values[0][0], latev[0]])
        rows = len(keys)
        cache.begin_step()
        new_k, new_v, q = (
            _rand(rows, KV, 1, D, seed=100 + step),
            _rand(rows, KV, 1, D, seed=200 + step),
            _rand(rows, H, 1, D, seed=300 + step),
        )
        cache.update(new_k, new_v, 0)
        out, _ = ragged_attention(_Module(0), q, new_k, new_v, None, ragged=cache)
        for i in range(rows):
            keys[i].append(new_k[i])
            values[i].append(new_v[i])
        torch.testing.assert_close(out.transpose(1, 2), _reference(q, [torch.cat(k, -2) for k in keys], [torch.cat(v, -2) for v in values]))
        cache.end_step()
    assert cache.positions() == [4 + 73, 4 + 71, 4 + 62]


def test_merge_is_softmax_over_the_union():
    q, k, v = _rand(1, H, 1, D, seed=1), _rand(1, KV, 9, D, seed=2), _rand(1, KV, 9, D, seed=3)
    whole = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    parts = []
    for sl in (slice(0, 4), slice(4, 9)):
        s = torch.matmul(q.reshape(1, KV, H // KV, D), k[:, :, sl].transpose(-1, -2)) * D**-0.5
        parts.append((torch.matmul(torch.softmax(s, -1), v[:, :, sl]).reshape(1, H, 1, D), torch.logsumexp(s, -1).reshape(1, H, 1)))
    torch.testing.assert_close(merge_attention(*parts), whole)


# -- the engine -------------------------------------------------------------------------------------
def _prompts(model):
    short = model.render_chat([{"role": "user", "content": "Name a colour."}]).ids
    long = model.render_chat([{"role": "user", "content": "Explain in two sentences why the sky is blue during the day."}]).ids
    return short, long


def _same(a, b):
    assert a.token_ids == b.token_ids and a.forced.tolist() == b.forced.tolist() and a.edits == b.edits
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=LOGPROB_ATOL)
    np.testing.assert_allclose(a.entropy, b.entropy, atol=ENTROPY_ATOL)


def test_the_engine_runs_ragged_and_a_lone_row_is_bit_identical(model):
    assert model.ragged and model.model.config._attn_implementation == "sleight_ragged"
    short, _ = _prompts(model)
    ragged = model.greedy([short], 16, top_k=5)[0]
    model.ragged = False
    try:
        rect = model.greedy([short], 16, top_k=5)[0]
    finally:
        model.ragged = True
    assert ragged.token_ids == rect.token_ids
    assert np.array_equal(ragged.logprobs, rect.logprobs) and np.array_equal(ragged.entropy, rect.entropy)


def _swap_hook():
    """Every row: at its (4 + row)-th token, withdraw 1 or 2 tokens and force 1 or 2 (once)."""
    done: set[tuple[int, int]] = set()

    def hook(row, out, proposed):
        if proposed is None or len(out) != 4 + row % 5 or (row, len(out)) in done:
            return None
        done.add((row, len(out)))
        return Edit(force=(28, 30 + row)[: 1 + row % 2], retract=1 + row % 2)

    return hook


@pytest.mark.slow
def test_pieces_and_retractions_decode_as_alone(model, monkeypatch):
    """A 24-row hooked request joins a running batch of 20 live rows in pieces (16, then the rest as
    rows retire), its prefix computed once and shared; every retraction shortens its row (the cache
    holds exactly each row's prompt and accepted tokens, never a masked hole); every row decodes as
    the same request alone."""
    short, long = _prompts(model)
    forced = [[], [11], [12, 13]] * 8
    alone = model.greedy([long] * 24, 12, hook=_swap_hook(), forced=forced, top_k=5)
    model.ragged = False
    try:
        rect = model.greedy([long] * 24, 12, hook=_swap_hook(), forced=forced, top_k=5)
    finally:
        model.ragged = True
    stream = model.stream(top_k=5, live_rows=20)
    stream.submit([short] * 4, 6)
    gid = stream.submit([long] * 24, 12, hook=_swap_hook(), forced=forced)
    adds: list[tuple[object, int]] = []
    add, step = RaggedCache.add, GreedyStream._step_ragged

    def add_and_note(self, prefix, lens, *a, **k):
        adds.append((prefix, len(lens)))
        return add(self, prefix, lens, *a, **k)

    def step_and_check(self):
        step(self)
        if self.cache is not None:
            st = self.state
            assert self.cache.positions() == [len(short if st.rows[r].group == 0 else long) + len(st.rows[r].out) for r in st.alive]

    monkeypatch.setattr(RaggedCache, "add", add_and_note)
    monkeypatch.setattr(GreedyStream, "_step_ragged", step_and_check)
    got = dict(stream)
    assert stream.peak_rows == 20 and len(got[gid]) == 24
    assert [n for _, n in adds] == [4, 16, 8] and adds[1][0] is adds[2][0] is not None  # one prefix, forked to both pieces
    for a, b, c in zip(alone, got[gid], rect):
        _same(a, b)
        _same(c, b)
    assert got[0][0].token_ids == model.greedy([short], 6, top_k=5)[0].token_ids
