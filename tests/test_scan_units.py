"""Pure pieces of the scan: the published text parser, the rotation contrast, the (f) readout,
within-document grades (against scipy) and the flag rules."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from sleight.readout.scan.grades import paired_document_difference, per_document_rho, spearman, within_document_spearman
from sleight.readout.scan.text_parsers import (
    LetterContrast,
    continuation_forecast,
    first_grid_value,
    first_uppercase_ab,
    rotation_contrast,
)


def test_first_uppercase_ab_is_opencompass_rule():
    assert first_uppercase_ab("A") == "A" and first_uppercase_ab("  B: INCORRECT") == "B"
    assert first_uppercase_ab("Based on the text, A") == "B"  # no word boundaries, as published
    assert first_uppercase_ab("correct") == "unknown" and first_uppercase_ab("C) 7") == "unknown"


def test_rotation_contrast():
    judge = [{"item": "x", "gold_letter": g, "verdict": "A"} for g in "ABCD"]
    r = rotation_contrast(judge)
    assert r.contrast == pytest.approx(0.0) and r.tracking_items == () and r.accuracy == 1.0
    reader = [{"item": "y", "gold_letter": g, "verdict": g if g in "AB" else "unknown"} for g in "ABCD"]
    r = rotation_contrast(judge + reader)
    assert r.tracking_items == ("y",)
    assert r.per_letter["B"] == LetterContrast(at_gold=0.5, gold_elsewhere=0.0, contrast=0.5)
    assert r.letter_rate == pytest.approx(0.75) and r.verdicts_by_gold["C"] == {"A": 1, "unknown": 1}


def test_continuation_forecast_reads_the_first_grid_value():
    grid = ("10", "30", "50", "70", "90")
    assert continuation_forecast("About 70 of them, maybe 30.", grid) == pytest.approx(0.7)
    assert continuation_forecast("100 readers; 3.5 points; 300", grid) == 0.5  # no grid value as a whole number
    assert first_grid_value("B. Then 10%", grid) == "10" and first_grid_value("", grid) is None
    assert continuation_forecast("none", grid, missing=0.5) == 0.5


def test_spearman_against_scipy_and_undefined_not_zero():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.integers(1, 6, 7).astype(float), rng.normal(size=7)
        expected = spearmanr(x, y).statistic
        got = spearman(x, y)
        assert (got is None) if np.ptp(x) == 0 else got == pytest.approx(expected)
    assert spearman([3, 3, 3], [1, 2, 3]) is None and spearman([1, 2], [2, 2]) is None and spearman([1], [1]) is None


def test_within_document_average_and_paired_bootstrap():
    docs = ["d1"] * 3 + ["d2"] * 3 + ["d3"] * 3
    human = [1, 3, 5, 2, 4, 5, 1, 2, 3]
    a = [0.1, 0.5, 0.9, 0.3, 0.2, 0.8, 0.4, 0.4, 0.4]  # d3 constant: undefined
    b = [0.9, 0.5, 0.1, 0.1, 0.2, 0.3, 0.1, 0.2, 0.3]
    per = per_document_rho(a, human, docs)
    assert per["d3"] is None and per["d1"] == pytest.approx(1.0) and per["d2"] == pytest.approx(spearmanr(a[3:6], human[3:6]).statistic)
    w = within_document_spearman(a, human, docs)
    assert w.n_undefined == 1 and w.rho == pytest.approx((per["d1"] + per["d2"]) / 2)
    d = paired_document_difference(a, b, human, docs, B=500)
    pb = per_document_rho(b, human, docs)
    assert d.n_paired == 2 and d.diff == pytest.approx((per["d1"] + per["d2"] - pb["d1"] - pb["d2"]) / 2)
    assert d.low <= d.diff <= d.high
    assert within_document_spearman([None, None], [1, 2], ["d", "d"]).rho is None
