"""Δsurprisal / Δentropy definitions (SPEC §3.3) on hand-made arrays, checked against plain loops."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sleight.tamper.signals import (
    clean_windows,
    entropy_top,
    mask_injected,
    matched_windows,
    pooled_mean,
    study_windows,
    swap_runs,
    trial_deltas,
)
from tolerances import FLOAT64_RTOL


def test_entropy_of_top_k_is_renormalised():
    k = 20
    uniform = np.full((1, k), math.log(1 / 1000))  # 20 equal candidates, 2% of the mass
    assert np.allclose(entropy_top(uniform), math.log(k))
    peaked = np.array([[0.0] + [-50.0] * (k - 1)])
    z = math.log1p((k - 1) * math.exp(-50))  # -log p of the peak; the 19 others have p = e^(-50 - z)
    assert entropy_top(peaked)[0] == pytest.approx(z * math.exp(-z) + (k - 1) * (50 + z) * math.exp(-50 - z), rel=FLOAT64_RTOL)  # ~2e-19, not 0
    lp = np.log(np.array([[0.5, 0.25, 0.125, 0.125]]))
    assert np.isclose(entropy_top(lp)[0], -(0.5 * math.log(0.5) + 0.25 * math.log(0.25) + 2 * 0.125 * math.log(0.125)))


def test_swap_runs_are_maximal_injected_runs():
    inj = np.array([1, 1, 0, 0, 1, 0, 1, 1, 1], dtype=bool)
    assert swap_runs(inj) == [(0, 2), (4, 5), (6, 9)]
    assert swap_runs(np.zeros(4, dtype=bool)) == []
    assert np.isnan(mask_injected(np.arange(9.0), inj)[[0, 1, 4, 6, 7, 8]]).all()


def test_windows_skip_injected_tokens_and_differ_in_overlap():
    #           0  1  2  3  4  5  6  7  8  9 10 11
    inj = np.array([0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0], dtype=bool)
    steps = [1, 4]
    assert [w.tolist() for w in study_windows(inj, steps, 3)] == [[2, 3, 6], [6, 7, 8]]  # overlaps the next swap
    assert [w.tolist() for w in matched_windows(inj, steps, 3)] == [[2, 3], [6, 7, 8]]  # stops at the next swap
    assert [w.tolist() for w in study_windows(inj, [4], 20)] == [[6, 7, 8, 9, 10, 11]]  # cut at the end
    assert [w.tolist() for w in clean_windows(12, [1, 5], [2, 6], 3)] == [[2, 3, 4], [6, 7, 8]]
    assert pooled_mean(np.arange(12.0), []) is None
    assert pooled_mean(np.arange(12.0), [np.array([2, 3]), np.array([3])]) == (2 + 3 + 3) / 3


def test_trial_deltas_match_a_plain_loop():
    rng = np.random.default_rng(0)
    n, width = 40, 8
    inj = np.zeros(n, dtype=bool)
    inj[[0, 1, 9, 20, 21, 38]] = True
    steps = [a for a, _ in swap_runs(inj)]
    trial = {k: rng.random(n) * 5 for k in ("surprisal", "entropy_top20", "entropy_full")}
    clean = {k: rng.random(30) * 5 for k in trial}
    c_starts, c_ends = [0, 10, 25], [1, 12, 26]
    got = trial_deltas(trial, inj, steps, clean, c_starts, c_ends, width)

    def loop(values, overlap):
        pooled = []
        for i, s in enumerate(steps):
            stop = n if overlap or i + 1 == len(steps) else steps[i + 1]
            win = [j for j in range(s + 1, stop) if not inj[j]][:width]
            pooled += [values[j] for j in win]
        return sum(pooled) / len(pooled)

    def clean_base(values):
        pooled = []
        for i, e in enumerate(c_ends):
            stop = c_starts[i + 1] if i + 1 < len(c_starts) else len(values)
            pooled += list(values[e : min(e + width, stop)])
        return sum(pooled) / len(pooled)

    for sig, col in (("surprisal", "delta_surprisal"), ("entropy_top20", "delta_entropy"), ("entropy_full", "delta_entropy_full")):
        assert np.isclose(got[col], loop(trial[sig], True) - clean[sig].mean())
        assert np.isclose(got[col + "_matched"], loop(trial[sig], False) - clean_base(clean[sig]))
    none = trial_deltas(trial, np.zeros(n, dtype=bool), [], clean, c_starts, c_ends, width)
    assert all(v is None for v in none.values())
