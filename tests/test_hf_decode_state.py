"""The hf engine's lockstep decode state on hand-made distributions (no model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sleight.backends import Edit
from sleight.backends.decode_state import RETRACT_WINDOW, DecodeState, position_records
from tolerances import float32_reorder_atol

VOCAB = 8


def records(batch: int, seed: int, top_k: int = 3):
    g = torch.Generator().manual_seed(seed)
    return position_records(torch.randn((batch, VOCAB), generator=g), top_k)


def test_greedy_is_argmax_read_off_the_top_k():
    """The first of equal maxima, as argmax gives it, whichever order top-k lists a tie in."""
    logits = torch.randn((4, VOCAB), generator=torch.Generator().manual_seed(1))
    logits[2, 6] = logits[2, 3] = logits[2].max() + 1
    for k in (0, 1, 3):
        rec = position_records(logits, k)
        assert rec.greedy() == logits.argmax(-1).tolist() and rec.greedy()[2] == 3


def test_position_records_formula():
    logits = torch.randn((2, 5, VOCAB), generator=torch.Generator().manual_seed(0))
    rec = position_records(logits, 3)
    lp = torch.log_softmax(logits.float(), dim=-1)
    assert torch.equal(rec.lp, lp)
    # one fused dot product a position: the spelled-out sum to float32 rounding (8 terms <= log 8)
    np.testing.assert_allclose(rec.entropy, (-(lp.exp() * lp).sum(-1)).numpy(), atol=float32_reorder_atol(VOCAB, np.log(VOCAB)))
    masked = logits.clone()
    masked[0, 1, :3] = float("-inf")  # 0 * -inf: those terms count as 0, not NaN
    lpm = torch.log_softmax(masked, dim=-1)
    np.testing.assert_allclose(
        position_records(masked, 3).entropy[0, 1],
        float(-(lpm.exp() * lpm)[0, 1, 3:].sum()),
        atol=float32_reorder_atol(VOCAB, np.log(VOCAB)),
    )
    tv, ti = torch.topk(lp, 3, dim=-1)
    assert np.array_equal(rec.top_ids, ti.numpy()) and np.array_equal(rec.top_lp, tv.numpy())
    assert rec.top_ids.shape == (2, 5, 3) and rec.top_lp.dtype == np.float32
    assert position_records(logits, 0).top_ids.shape == (2, 5, 0)
    assert position_records(logits, 100).top_ids.shape == (2, 5, VOCAB)  # capped at the vocabulary


def test_accept_records_the_rows_own_batch_position():
    state = DecodeState([[], [5]], max_new=4, hook=None, row_offset=0, eos=frozenset({0}))
    rec = records(2, 1)
    state.begin(rec, col=10)
    assert state.choose([3, 7]) == []
    r0, r1 = state.rows
    assert r0.out == [3] and not r0.forced[0] and r1.out == [5] and r1.forced[0]  # the queue goes first
    assert r0.lp[0] == float(rec.lp[0, 3]) and r1.lp[0] == float(rec.lp[1, 5])
    assert np.array_equal(r1.top_ids[0], rec.top_ids[1]) and r1.ent[0] == float(rec.entropy[1])
    assert r0.cache_pos == [10] and state.fed() == [True, True]


def test_edit_rescored_from_the_kept_step_and_masked():
    def hook(row, out, proposed):
        return Edit(force=(6, 2), retract=2) if len(out) == 3 else None

    state = DecodeState([[], []], max_new=8, hook=hook, row_offset=0, eos=frozenset({0}))
    kept = []
    for step in range(4):
        rec = records(2, 10 + step)
        kept.append(rec)
        state.begin(rec, col=20 + step)
        off = state.choose([1, 1])
        if step == 3:  # tokens of steps 1 and 2 withdrawn; their cache columns are masked
            assert off == [(0, 21), (0, 22), (1, 21), (1, 22)]
    row = state.rows[0]
    assert row.out == [1, 6] and row.forced == [False, True] and row.edits == [1] and row.queue == [2]
    # the forced token takes the position of the first retracted one: step 1's distribution
    assert row.lp[1] == float(kept[1].lp[0, 6]) and np.array_equal(row.top_ids[1], kept[1].top_ids[0])
    assert row.cache_pos == [20, 23] and row.dist_step == [0, 1]


def test_retract_past_the_window_and_budget():
    state = DecodeState([[]], max_new=20, hook=None, row_offset=0, eos=frozenset())
    for step in range(RETRACT_WINDOW + 1):
        state.begin(records(1, step), col=step)
        state.choose([4])
    with pytest.raises(RuntimeError, match="past the kept window"):
        state.apply_edit(0, Edit(force=(1,), retract=RETRACT_WINDOW + 1))
    assert state.apply_edit(0, Edit(force=(), retract=1)) == []  # this step's token: not yet in the cache
    assert state.rows[0].done and state.rows[0].finish == "length"
    assert state.retire() == [] and state.alive == []


def test_eos_stops_and_retire_keeps_batch_positions():
    state = DecodeState([[], [], []], max_new=5, hook=None, row_offset=0, eos=frozenset({0}))
    state.begin(records(3, 0), col=0)
    state.choose([2, 0, 3])
    assert state.fed() == [True, False, True] and state.rows[1].finish == "stop"
    assert state.retire() == [0, 2] and state.alive == [0, 2]
    state.begin(records(2, 1), col=1)
    state.choose([4, 5])
    assert state.rows[2].out == [3, 5] and state.rows[2].lp[1] == float(state._kept[1].records.lp[1, 5])
