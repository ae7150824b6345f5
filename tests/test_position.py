"""The shared scored-position reading against independent forward passes of the real model."""

from __future__ import annotations

import numpy as np
import pytest

from sleight.position import encode_continuation, read_positions, renormalise, suffix_after
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
