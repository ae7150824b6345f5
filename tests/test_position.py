"""The shared scored-position reading against independent forward passes of the real model."""

from __future__ import annotations

import numpy as np
import pytest

from sleight.position import encode_continuation, mass_bounds, read_positions, renormalise, suffix_after
from sleight.readout.audit.summary import at_floor, mass_interval
from tolerances import ENTROPY_ATOL, LOGPROB_ATOL, MASS_ATOL

CONTEXTS = [
    "Is water wet? Answer True or False.\nAnswer:",
    "Out of 100 such readers, about ",  # "about " + "True" merges the space: no prefix condition
    "Pick one: (A) yes or (B) no.\nThe answer is",
]
SETS = [
    [("True", "False"), (" True", " False")],
    [("True", "False")],
    [(" (A)", " (B)"), (" A", " B")],
]


@pytest.fixture(scope="module")
def readings(model):
    return read_positions(model, CONTEXTS, SETS, top_k=5, score_options=True)


def test_equal_to_a_separate_forward_pass(model, readings):
    for ctx, r in zip(CONTEXTS, readings):
        lp = model.next_token_logprobs([model.encode(ctx)])[0].astype(np.float64)
        assert r.context_ids == tuple(model.encode(ctx))
        assert r.argmax_id == int(np.argmax(lp))
        assert r.argmax_logprob == pytest.approx(float(lp.max()), abs=LOGPROB_ATOL)
        assert list(r.top_ids) == list(np.argsort(-lp)[:5])
        p = np.exp(lp)
        assert r.entropy == pytest.approx(float(-(p * lp).sum()), abs=ENTROPY_ATOL)
        for s in r.option_sets:
            if not s.boundary_preserved:
                continue
            firsts = sorted({t for t in s.first_ids if t is not None})
            assert s.mass == pytest.approx(float(p[firsts].sum()), abs=MASS_ATOL)
            for t, v in zip(s.first_ids, s.first_logprobs):
                assert v == pytest.approx(float(lp[t]), abs=LOGPROB_ATOL)
            for t, v in zip(s.isolated_ids, s.isolated_logprobs):
                assert t == model.encode(s.options[s.isolated_ids.index(t)])[0]
                assert v == pytest.approx(float(lp[t]), abs=LOGPROB_ATOL)
            full = model.continuation_logprobs(model.encode(ctx), [list(e) for e in s.encodings if e])
            assert s.logprobs == pytest.approx([float(np.sum(x)) for x in full], abs=LOGPROB_ATOL)


def test_a_context_with_options_to_score_is_read_in_one_pass(model, monkeypatch):
    """hf reads a context's next position and scores its multi-token options from one pass over the
    context (``read_scored``): the same record as ``read_next`` and the same log-probs as
    ``continuation_logprobs``; read_positions sends only the contexts without any to the batched read."""
    from sleight.backends.base import ScoredReads

    assert isinstance(model, ScoredReads)
    ctx = model.encode(CONTEXTS[2])
    conts = [encode_continuation(model, CONTEXTS[2], o) for o in (" (A)", " (B)", " A")]
    asked = sorted({c[0] for c in conts if c})
    record, scored = model.read_scored(ctx, asked, [c for c in conts if c], top_k=5)
    (alone,) = model.read_next([ctx], [asked], top_k=5)
    assert list(record.top_ids) == list(alone.top_ids)
    assert np.abs(np.asarray(record.logprobs) - np.asarray(alone.logprobs)).max() <= LOGPROB_ATOL
    for got, want in zip(scored, model.continuation_logprobs(ctx, [c for c in conts if c])):
        assert np.abs(got - want).max() <= LOGPROB_ATOL
    assert model.read_scored(ctx, asked, [], top_k=5)[1] == []

    batched: list[int] = []
    read_next = model.read_next
    monkeypatch.setattr(model, "read_next", lambda seqs, *a, **k: batched.append(len(seqs)) or read_next(seqs, *a, **k))
    contexts, sets = CONTEXTS + ["Say A or B:"], SETS + [[("A", "B")]]
    read_positions(model, contexts, sets, top_k=5, score_options=True)
    multi = [any(len(e or ()) > 1 for opts in ss for e in (encode_continuation(model, c, o) for o in opts)) for c, ss in zip(contexts, sets)]
    assert multi == [False, False, True, False]  # " (A)" is several tokens after its context; the rest one each
    assert batched == [3]  # the three without later tokens in one batched read; the third with its scoring, once


def test_mass_is_none_not_zero_when_the_prefix_condition_fails(model, readings):
    s = readings[1].option_sets[0]
    assert encode_continuation(model, CONTEXTS[1], "True") is None
    assert s.boundary_preserved is False and s.mass is None and s.distinct is False
    assert s.encodings[0] is None and s.first_logprobs[0] is None and s.logprobs[0] is None
    assert s.isolated_mass is not None  # the option encoded alone still reads (a misleading number)


def test_distinctness_and_shared_first_tokens_counted_once(model, readings):
    paren, letters = readings[2].option_sets
    assert paren.boundary_preserved and not paren.distinct  # " (" is the first token of both
    assert paren.first_ids[0] == paren.first_ids[1]
    assert paren.mass == float(np.exp(paren.first_logprobs[0]))  # once, not twice (the same exp of the same number: exact)
    assert letters.distinct and len(set(letters.first_ids)) == 2


def test_the_boundary_rule_and_the_renormaliser():
    assert suffix_after([1, 2], [1, 2, 3]) == [3]
    assert suffix_after([1, 2], [1, 2]) is None and suffix_after([1, 2], [1, 4, 3]) is None
    assert renormalise([None, 0.0]) is None and renormalise([]) is None and renormalise([float("nan"), 0.0]) is None
    assert renormalise([np.log(0.2), np.log(0.6)]) == pytest.approx([0.25, 0.75])


def test_mass_bounds_count_each_unlisted_id_once_at_the_listing_bound():
    """Issue #36 item 3: a server's top-k listing bounds every unlisted id by the k-th probability;
    the mass interval is what the listed first tokens carry, plus that bound per distinct unlisted
    one, at most 1; with every id listed it is the point mass twice."""
    lp = {1: np.log(0.5), 2: np.log(0.2)}
    assert mass_bounds([1, 2, 2], lp, None) == pytest.approx((0.7, 0.7))
    low, high = mass_bounds([1, 3, 4, 3], lp, np.log(0.01))
    assert low == pytest.approx(0.5) and high == pytest.approx(0.52)
    assert mass_bounds([3, 4], {5: np.log(0.9)}, np.log(0.6))[1] == 1.0  # never above 1
    with pytest.raises(ValueError, match="needs the bound"):
        mass_bounds([3], lp, None)


def test_a_floor_verdict_holds_for_the_whole_interval_or_is_undecided():
    assert at_floor(0.6, 0.9, 0.5) is True and at_floor(0.1, 0.4, 0.5) is False
    assert at_floor(0.4, 0.6, 0.5) is None and at_floor(0.5, 0.5, 0.5) is True
    assert at_floor(None, 0.4, 0.5) is None and at_floor(float("nan"), float("nan"), 0.5) is None
    # readings made before the bounds were recorded: the point mass twice; a table's NaN is none
    assert mass_interval({"option_mass": 0.3}) == (0.3, 0.3)
    assert mass_interval({"option_mass": float("nan"), "option_mass_low": float("nan"), "option_mass_high": float("nan")}) == (None, None)
    assert mass_interval({"option_mass": None, "option_mass_low": 0.2, "option_mass_high": 0.3}) == (0.2, 0.3)
