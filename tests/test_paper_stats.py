"""The paper's statistics (issue #19, item 3), on small examples whose values are computed by hand.

The issue names no section for these statistics beyond "the paper's readouts and statistics"; each
docstring says which rule of the issue it holds. The paper's own text is not available here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sleight.stats import prr
from sleight.stats.downstream import all_pairs, leave_one_out, paired_difference, per_letter_auroc
from tolerances import FLOAT64_ATOL, FLOAT64_RTOL

C6 = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
Q6 = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])


def test_prr_at_half_by_hand() -> None:
    """Paper: PRR at 0.5 (issue #19 item 3), lm-polygraph 0.7.0's ``PredictionRejectionArea(max_rejection=0.5)``.

    Six items, confidence descending, quality 1,0,1,0,1,0. At most int(0.5*6) = 3 rejected: the
    retention levels k = 4, 5, 6 have mean quality 2/4, 3/5, 3/6, area 8/15; the oracle (1,1,1,0,0,0)
    has 3/4, 3/5, 3/6, area 37/60; random is the mean quality 1/2. PRR = (8/15 - 1/2) / (37/60 - 1/2)
    = 2/7. The whole curve (k = 1..6) gives (113/180 - 1/2) / (97/120 - 1/2) = 46/111."""
    assert prr(C6, Q6, max_rejection=0.5) == pytest.approx(2 / 7, rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)
    assert prr(C6, Q6) == pytest.approx(46 / 111, rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)
    assert prr(C6, Q6, max_rejection=1.0) == prr(C6, Q6)


def test_prr_at_half_ties_and_edges_by_hand() -> None:
    """Paper: PRR at 0.5 (issue #19 item 3): ties averaged over their orders, the cut's edges.

    Confidence 0.9, 0.5, 0.5, 0.1 with quality 1, 0, 1, 0: at k = 3 the tied block is half retained,
    so m_3 = (1 + 2 * 1/2) / 3 = 2/3 and m_4 = 1/2, the oracle's too: PRR at 0.5 = 1. Two items
    reject int(0.5 * 2) = 1 item: only k = 2 counts, whose mean is the overall mean for every
    order, so model and oracle are both random and the ratio is undefined (NaN)."""
    c, q = np.array([0.9, 0.5, 0.5, 0.1]), np.array([1.0, 0.0, 1.0, 0.0])
    assert prr(c, q, max_rejection=0.5) == pytest.approx(1.0, rel=FLOAT64_RTOL)
    assert math.isnan(prr([0.2, 0.1], [1.0, 0.0], max_rejection=0.5))
    with pytest.raises(ValueError, match="max_rejection"):
        prr(c, q, max_rejection=0.0)


def test_prr_at_half_weighted_equals_gathered() -> None:
    """Paper: PRR at 0.5 (issue #19 item 3): a bootstrap replicate (counts) gives the value of the
    data set it stands for, so the intervals resample the same statistic."""
    rng = np.random.default_rng(3)
    for n in (5, 8, 13):
        c, q = rng.random(n), rng.integers(0, 2, n).astype(float)
        w = rng.integers(0, 3, (20, n))
        got = prr(c, q, weights=w, max_rejection=0.5)
        for r in range(w.shape[0]):
            idx = np.repeat(np.arange(n), w[r])
            want = prr(c[idx], q[idx], max_rejection=0.5) if idx.size else math.nan
            assert (math.isnan(want) and math.isnan(got[r])) or got[r] == pytest.approx(want, rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)


def test_prr_half_as_a_metric_with_pairs() -> None:
    """Paper: PRR at 0.5 and paired differences (issue #19 item 3): ``prr_0.5`` is a metric of the
    paired bootstrap like AUROC."""
    d = paired_difference("prr_0.5", C6, C6[::-1], Q6, B=50, seed=0)
    assert d.estimate_a == pytest.approx(2 / 7, rel=FLOAT64_RTOL)
    assert d.metric == "prr_0.5" and d.better == "higher"


def test_paired_differences_for_every_pair() -> None:
    """Paper: paired differences for every pair of readouts (issue #19 item 3), not only against
    Library. Three readouts give three pairs; each difference is the two AUROCs' difference:
    AUROC(a) = 1, AUROC(b) = 0 (reversed), AUROC(c) = 1/2 (constant)."""
    y = np.array([0.0, 0.0, 1.0, 1.0])
    scores = {"a": np.array([0.1, 0.2, 0.8, 0.9]), "b": np.array([0.9, 0.8, 0.2, 0.1]), "c": np.full(4, 0.5)}
    pairs = all_pairs("auroc", scores, y, B=20, seed=0)
    assert list(pairs) == ["a - b", "a - c", "b - c"]
    assert [pairs[k].diff for k in pairs] == [1.0, 0.5, -0.5]
    assert pairs["a - c"].a == "a" and pairs["a - c"].b == "c"


def test_per_letter_auroc_by_hand() -> None:
    """Paper: per-letter AUROC (issue #19 item 3), per gold letter A-D.

    Gold A: scores 0.9 (right), 0.1 (wrong) -> 1. Gold B: 0.2 (right), 0.8 (wrong) -> 0. Gold C:
    0.5 (right), 0.5 (wrong) -> 1/2 (a tie). Gold D: one item, one class -> NaN. Pooled, a score
    that tracks the letter can look good while each letter is at chance; here each is its own."""
    s = [0.9, 0.1, 0.2, 0.8, 0.5, 0.5, 0.7]
    y = [1, 0, 1, 0, 1, 0, 1]
    g = ["A", "A", "B", "B", "C", "C", "D"]
    out = per_letter_auroc(s, y, g)
    assert [out[k].auroc for k in "ABC"] == [1.0, 0.0, 0.5]
    assert math.isnan(out["D"].auroc) and out["D"].as_json() == {"n": 1, "n_positive": 1, "auroc": out["D"].auroc}
    assert [out[k].n for k in "ABCD"] == [2, 2, 2, 1]
    with pytest.raises(ValueError, match="one gold letter per item"):
        per_letter_auroc(s, y, g[:-1])


def test_leave_one_checkpoint_out_by_hand() -> None:
    """Paper: leave-one-checkpoint-out (issue #19 item 3): the average over checkpoints recomputed
    with each left out. Values 1, 2, 6: all 3; without the first (2+6)/2 = 4, without the second
    7/2, without the third 3/2; the largest shift is |3/2 - 3| = 3/2. On shared replicates (arrays)
    the average is element-wise."""
    out = leave_one_out({"q1": 1.0, "q2": 2.0, "q3": 6.0})
    assert out.all == 3.0 and out.without == {"q1": 4.0, "q2": 3.5, "q3": 1.5}
    assert (out.min, out.max, out.max_shift) == (1.5, 4.0, 1.5)
    reps = leave_one_out({"q1": [1.0, 3.0], "q2": [3.0, 5.0]})
    np.testing.assert_array_equal(reps.without["q1"], [3.0, 5.0])
    np.testing.assert_array_equal(reps.all, [2.0, 4.0])
    with pytest.raises(ValueError, match="at least two"):
        leave_one_out({"q1": 1.0})
