"""Discrimination, calibration, rejection and agreement metrics as pure numpy functions.

Every metric that the bootstrap uses takes an optional ``weights`` argument:
a ``(b, n)`` matrix of non-negative integer counts, row ``r`` saying how many
times each of the ``n`` items appears in replicate ``r``.  With weights the
metric returns a length-``b`` array, one value per replicate, computed without
materialising the resampled data.  Counts rather than gathered index matrices
because (a) cluster resampling with unequal cluster sizes gives replicates of
different lengths, which a rectangular index matrix cannot hold but a count
matrix always can, and (b) rank-based metrics can then sort the original data
once instead of once per replicate, so a replicate costs O(n) rather than
O(n log n).

``auroc``, ``brier`` and ``prr`` also accept 2-D inputs ``(b, n)`` and work
along the last axis, so they can be fed gathered arrays directly (see
:func:`sleight.stats.bootstrap.gathered`).

Only numpy is required; scipy, scikit-learn and statsmodels are used by the
tests as references, never here.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "auroc",
    "average_ranks",
    "brier",
    "cohen_kappa",
    "fleiss_kappa",
    "mean",
    "prr",
]

FloatOrArray = float | NDArray[np.float64]


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------


def _as_float(x: ArrayLike, name: str) -> NDArray[np.float64]:
    arr = np.asarray(x, dtype=np.float64)
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    return arr


def _as_labels(y: ArrayLike) -> NDArray[np.float64]:
    """Binary labels as float 0/1; anything else is an error, not a guess."""
    arr = np.asarray(y)
    if arr.dtype == bool:
        return arr.astype(np.float64)
    arr = np.asarray(arr, dtype=np.float64)
    if not np.isin(arr, (0.0, 1.0)).all():
        raise ValueError("labels must be binary (0/1 or bool)")
    return arr


def _check_same_shape(a: NDArray, b: NDArray, names: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{names} must have the same shape, got {a.shape} and {b.shape}")
    if a.ndim not in (1, 2):
        raise ValueError(f"{names} must be 1-D (items) or 2-D (batch, items), got {a.ndim}-D")


def _as_weights(weights: ArrayLike, n: int) -> NDArray[np.int64] | NDArray[np.float64]:
    """Replicate counts as (b, n); integer counts stay integer so that sums of
    them are exact and integer cumulative sums stay fast."""
    w = np.asarray(weights)
    w = w.astype(np.int64 if w.dtype.kind in "biu" else np.float64, copy=False)
    if w.ndim == 1:
        w = w[None, :]
    if w.ndim != 2 or w.shape[1] != n:
        raise ValueError(f"weights must have shape (b, {n}), got {np.shape(weights)}")
    if w.size and not w.min() >= 0:  # also catches NaN
        raise ValueError("weights are counts and must be non-negative")
    return w


def _scalar_or_rows(out: NDArray[np.float64], batched: bool) -> FloatOrArray:
    return out if batched else float(out[0])


def _tie_starts(sorted_keys: NDArray) -> NDArray[np.intp]:
    """Start index of each run of equal values in a sorted 1-D array."""
    if sorted_keys.size == 0:
        return np.zeros(0, dtype=np.intp)
    new = np.empty(sorted_keys.shape, dtype=bool)
    new[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=new[1:])
    return np.flatnonzero(new)


def _block_sums(x: NDArray[Any], starts: NDArray[np.intp]) -> NDArray[Any]:
    """Sum ``x`` (b, n) over tie blocks along axis 1; no-op when there are no ties."""
    if starts.size == x.shape[1]:
        return x
    return np.add.reduceat(x, starts, axis=1)


def _tie_bounds(sorted_rows: NDArray) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """For each position of row-sorted data, first and last index of its tie block."""
    n = sorted_rows.shape[-1]
    idx = np.arange(n)
    new = np.ones(sorted_rows.shape, dtype=bool)
    np.not_equal(sorted_rows[..., 1:], sorted_rows[..., :-1], out=new[..., 1:])
    last = np.ones(sorted_rows.shape, dtype=bool)
    last[..., :-1] = new[..., 1:]
    first_idx = np.maximum.accumulate(np.where(new, idx, 0), axis=-1)
    last_idx = np.minimum.accumulate(np.where(last, idx, n - 1)[..., ::-1], axis=-1)[..., ::-1]
    return first_idx, last_idx


# ---------------------------------------------------------------------------
# ranks and AUROC
# ---------------------------------------------------------------------------


def average_ranks(x: ArrayLike) -> NDArray[np.float64]:
    """1-based ranks along the last axis, ties sharing their average rank.

    Same as ``scipy.stats.rankdata(x, axis=-1)`` (method ``"average"``), in
    numpy only so that sleight does not depend on scipy.
    """
    arr = _as_float(x, "x")
    if arr.shape[-1] == 0:
        return arr.copy()
    order = np.argsort(arr, axis=-1, kind="stable")
    xs = np.take_along_axis(arr, order, axis=-1)
    first, last = _tie_bounds(xs)
    avg = (first + last) / 2.0 + 1.0
    ranks = np.empty_like(avg)
    np.put_along_axis(ranks, order, avg, axis=-1)
    return ranks


def auroc(scores: ArrayLike, labels: ArrayLike, weights: ArrayLike | None = None) -> FloatOrArray:
    """Area under the ROC curve, as the Mann–Whitney U statistic / (n_pos n_neg).

    Ties in ``scores`` count one half (average ranks), which is what
    ``sklearn.metrics.roc_auc_score`` computes.  NaN (not an error) when a
    class is empty, because a bootstrap replicate can lose a class and should
    then be dropped rather than abort the run.

    ``scores``/``labels`` 1-D give a float.  2-D ``(b, n)`` inputs are a batch
    along the last axis and give shape ``(b,)``.  With 1-D inputs and
    ``weights`` of shape ``(b, n)`` (item counts per replicate, see module
    docstring) the result is the AUROC of each weighted replicate, shape
    ``(b,)``.
    """
    s = _as_float(scores, "scores")
    y = _as_labels(labels)
    _check_same_shape(s, y, "scores and labels")
    if weights is not None:
        if s.ndim != 1:
            raise ValueError("weights need 1-D scores and labels")
        return _auroc_weighted(s, y, _as_weights(weights, s.size))
    batched = s.ndim == 2
    s2, y2 = np.atleast_2d(s), np.atleast_2d(y)
    n_pos = y2.sum(axis=-1)
    n_neg = y2.shape[-1] - n_pos
    if y2.shape[-1] == 0:
        out = np.full(y2.shape[0], np.nan)
    else:
        order = np.argsort(s2, axis=-1, kind="stable")
        ss = np.take_along_axis(s2, order, axis=-1)
        ys = np.take_along_axis(y2, order, axis=-1)
        first, last = _tie_bounds(ss)
        rank_sum = ((first + last) * ys).sum(axis=-1) / 2.0 + n_pos
        u = rank_sum - n_pos * (n_pos + 1) / 2.0
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where((n_pos > 0) & (n_neg > 0), u / (n_pos * n_neg), np.nan)
    return _scalar_or_rows(out, batched)


def _auroc_weighted(s: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[Any]) -> NDArray[np.float64]:
    # A replicate only reweights the original items, so sort once: for each
    # positive item, lo/hi = number of negatives scoring strictly below / at
    # most its score.  With C the cumulative negative weight in score order,
    # 2U = sum over positives of w_i (C[lo_i] + C[hi_i]) (ties count one
    # half).  Integer counts keep this exact; cost is O(n) per replicate.
    pos = np.flatnonzero(y == 1.0)
    neg = np.flatnonzero(y == 0.0)
    neg = neg[np.argsort(s[neg], kind="stable")]
    s_neg = s[neg]
    lo = np.searchsorted(s_neg, s[pos], side="left")
    hi = np.searchsorted(s_neg, s[pos], side="right")
    wp = np.take(w, pos, axis=1)
    cum = np.zeros((w.shape[0], neg.size + 1), dtype=w.dtype)
    np.cumsum(np.take(w, neg, axis=1), axis=1, out=cum[:, 1:])
    if np.array_equal(lo, hi):
        twice_u = 2 * np.einsum("ij,ij->i", wp, cum[:, lo])
    else:
        twice_u = np.einsum("ij,ij->i", wp, cum[:, lo] + cum[:, hi])
    denom = 2.0 * wp.sum(axis=1) * cum[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, twice_u / denom, np.nan)


# ---------------------------------------------------------------------------
# Brier score and plain mean
# ---------------------------------------------------------------------------


def brier(probs: ArrayLike, labels: ArrayLike, weights: ArrayLike | None = None) -> FloatOrArray:
    """Brier score: mean squared difference between probability and 0/1 outcome.

    Equals ``sklearn.metrics.brier_score_loss``.  Probabilities outside [0, 1]
    are an error: they mean the caller passed logits or scores, and a Brier
    score of those is meaningless.  Shapes and ``weights`` as in :func:`auroc`.
    """
    p = _as_float(probs, "probs")
    y = _as_labels(labels)
    _check_same_shape(p, y, "probs and labels")
    if ((p < 0.0) | (p > 1.0)).any():
        raise ValueError("probs must lie in [0, 1]")
    if p.shape[-1] == 0:
        raise ValueError("brier of an empty sample is undefined")
    sq = (p - y) ** 2
    if weights is not None:
        if p.ndim != 1:
            raise ValueError("weights need 1-D probs and labels")
        w = _as_weights(weights, p.size)
        return (w @ sq) / w.sum(axis=1)
    return _scalar_or_rows(np.atleast_2d(sq).mean(axis=-1), p.ndim == 2)


def mean(x: ArrayLike, weights: ArrayLike | None = None) -> FloatOrArray:
    """Mean over items (first axis), in the batched-statistic form the bootstrap expects.

    Exists so that accuracy-type readouts (mean of 0/1 correctness) can be
    bootstrapped without writing a weighted statistic by hand.
    """
    arr = _as_float(x, "x")
    if arr.ndim != 1:
        raise ValueError("mean expects a 1-D array of per-item values")
    if arr.size == 0:
        raise ValueError("mean of an empty sample is undefined")
    if weights is None:
        return float(arr.mean())
    w = _as_weights(weights, arr.size)
    return (w @ arr) / w.sum(axis=1)


# ---------------------------------------------------------------------------
# prediction-rejection ratio
# ---------------------------------------------------------------------------


def prr(confidence: ArrayLike, quality: ArrayLike, weights: ArrayLike | None = None, *, max_rejection: float = 1.0) -> FloatOrArray:
    """Prediction-rejection ratio: how much of the oracle's gain from rejecting
    low-confidence items the confidence actually achieves (random = 0, oracle = 1).

    Discretisation.  Sort the ``n`` items by confidence, most confident first.
    For each retention level ``k = 1..n`` (rejection fraction ``(n-k)/n``, i.e.
    ``r = 0, 1/n, ..., (n-1)/n``) let ``m_k`` be the mean quality of the ``k``
    retained items.  The area under the rejection curve is the plain average
    ``AUC = (1/n) * sum_k m_k`` (left Riemann sum over the rejection fractions,
    no trapezoid, no extra point at r = 1).  Then

        PRR = (AUC_model - AUC_random) / (AUC_oracle - AUC_random)

    where ``AUC_random`` is exact: under a uniformly random order every ``m_k``
    has expectation equal to the overall mean quality, so ``AUC_random`` is
    that mean.  ``AUC_oracle`` ranks the items by quality itself.

    Ties in confidence.  Items with equal confidence have no order, so the
    curve is averaged exactly over all orders of each tied block: for ``k``
    inside a block the retained sum is (sum of the blocks before) + (number of
    the block's items retained) x (block mean quality).  This is linear in the
    retained sum, so it equals the average over tie orders, and it makes
    constant confidence give exactly 0.

    NaN when all qualities are equal (the oracle cannot improve on random, the
    ratio is 0/0).  Shapes and ``weights`` as in :func:`auroc`; a weighted
    replicate is the data set in which item ``i`` appears ``w_i`` times.

    ``max_rejection`` (PRR at 0.5 is ``max_rejection=0.5``) cuts the curve at that rejection rate,
    as lm-polygraph 0.7.0's ``PredictionRejectionArea(max_rejection)`` does
    (``ue_metrics/pred_rej_area.py`` lines 43-52): with ``r = int(max_rejection * n)`` rejected
    at most, the curve keeps the retention levels ``k = n - r + 1 .. n`` (rejection fractions
    ``0, 1/n, ..., (r-1)/n``) and its area is their plain average ``(1/r) * sum m_k``; the
    oracle and random areas are cut the same way (the library's ``ue_metric(-q, q)`` and
    ``get_random_scores``, ``utils/manager.py`` lines 437-443, 471-486). Random is again exactly
    the mean quality, where the library averages 1000 seeded shuffles. NaN when ``r`` is 0.
    ``max_rejection=1`` is the whole curve, computed as before.
    """
    if not 0.0 < max_rejection <= 1.0:
        raise ValueError(f"max_rejection must be in (0, 1], got {max_rejection}")
    c = _as_float(confidence, "confidence")
    q = _as_float(quality, "quality")
    _check_same_shape(c, q, "confidence and quality")
    if c.shape[-1] == 0:
        raise ValueError("prr of an empty sample is undefined")
    if weights is not None:
        if c.ndim != 1:
            raise ValueError("weights need 1-D confidence and quality")
        w = _as_weights(weights, c.size)
        if w.dtype.kind == "f":
            if not np.array_equal(w, np.round(w)):
                raise ValueError("prr weights must be integer counts (the curve has one point per retained item)")
            w = w.astype(np.int64)
        if max_rejection == 1.0:
            model = _rejection_excess_weighted(c, q, w)
            oracle = _rejection_excess_weighted(q, q, w)
        else:
            model = _rejection_excess_weighted_cut(c, q, w, max_rejection)
            oracle = _rejection_excess_weighted_cut(q, q, w, max_rejection)
        batched = True
    else:
        batched = c.ndim == 2
        c2, q2 = np.atleast_2d(c), np.atleast_2d(q)
        model = _rejection_excess(c2, q2, max_rejection)
        oracle = _rejection_excess(q2, q2, max_rejection)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(oracle > 0, model / oracle, np.nan)
    return _scalar_or_rows(out, batched)


def _rejection_excess(key: NDArray[np.float64], q: NDArray[np.float64], max_rejection: float = 1.0) -> NDArray[np.float64]:
    """AUC of the rejection curve ordered by ``key`` minus AUC_random, per row (the curve cut at
    ``max_rejection``: the last ``int(max_rejection * n)`` retention levels)."""
    b, n = key.shape
    order = np.argsort(-key, axis=-1, kind="stable")
    ks = np.take_along_axis(key, order, axis=-1)
    qs = np.take_along_axis(q, order, axis=-1)
    csum = np.zeros((b, n + 1))
    np.cumsum(qs, axis=-1, out=csum[:, 1:])
    first, last = _tie_bounds(ks)
    before = np.take_along_axis(csum, first, axis=-1)  # sum of the blocks before
    block_mean = (np.take_along_axis(csum, last + 1, axis=-1) - before) / (last + 1 - first)
    k = np.arange(1, n + 1, dtype=np.float64)
    retained = before + (k - first) * block_mean  # expected sum of the top k
    qbar = csum[:, -1:] / n  # same arithmetic as a single block's mean: constant key gives exactly 0
    excess = (retained - k * qbar) / k
    if max_rejection == 1.0:
        return excess.mean(axis=-1)
    n_rej = int(max_rejection * n)
    if n_rej == 0:
        return np.full(b, np.nan)
    return excess[:, n - n_rej : n - 1].sum(axis=-1) / n_rej  # k = n adds exactly 0 (see the weighted cut)


def _rejection_excess_weighted_cut(key: NDArray[np.float64], q: NDArray[np.float64], w: NDArray[Any], max_rejection: float) -> NDArray[np.float64]:
    """As :func:`_rejection_excess_weighted` with the curve cut at ``max_rejection``: per
    replicate of ``N`` items only the positions ``k > N - int(max_rejection * N)`` count.

    Block j (count W_j, quality sum Q_j, mean mu_j, a_j items and quality sum P_j before it) covers
    the positions a_j+1..A_j; the kept ones are e_j+1..f_j with e_j = max(a_j, N - r) and
    f_j = max(min(A_j, N - 1), e_j) (the last position, k = N, is left out: its term is exactly 0,
    and summing its float residue would turn an undefined 0/0 into a number). Their terms
    (S_k - k qbar) / k, S_k = P_j + (k - a_j) mu_j, sum to
    (P_j - a_j mu_j) (H(f_j) - H(e_j)) + (mu_j - qbar) (f_j - e_j). The total is divided by r.
    """
    order = np.argsort(-key, kind="stable")
    starts = _tie_starts(key[order])
    ws = np.take(w, order, axis=1)
    wb = _block_sums(ws, starts)
    qb = _block_sums(ws * q[order], starts).astype(np.float64)
    upto = np.cumsum(wb, axis=1)  # A_j
    before = upto - wb  # a_j
    n_tot = upto[:, -1]
    n_rej = (max_rejection * n_tot).astype(np.int64)  # int() of a non-negative float: floor
    harmonic = np.empty(int(n_tot.max()) + 1)
    harmonic[0] = 0.0
    np.cumsum(1.0 / np.arange(1, harmonic.size), out=harmonic[1:])
    lo = np.maximum(before, (n_tot - n_rej)[:, None])  # e_j
    hi = np.maximum(np.minimum(upto, (n_tot - 1)[:, None]), lo)  # position N left out: its term is 0
    mu = qb / np.maximum(wb, 1)
    p_before = np.cumsum(qb, axis=1) - qb  # P_j
    qbar = (qb.sum(axis=1) / np.maximum(n_tot, 1))[:, None]
    total = ((p_before - before * mu) * (harmonic[hi] - harmonic[lo]) + (mu - qbar) * (hi - lo)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_rej > 0, total / np.maximum(n_rej, 1), np.nan)


def _rejection_excess_weighted(key: NDArray[np.float64], q: NDArray[np.float64], w: NDArray[Any]) -> NDArray[np.float64]:
    """As :func:`_rejection_excess` for count-weighted replicates, O(n) per replicate.

    A replicate's sorted sequence consists of the original tie blocks j (a
    duplicated item ties with itself), block j with total count W_j, quality
    sum Q_j and mean mu_j = Q_j / W_j, with a_j items and quality sum P_j
    before it; A_j = a_j + W_j.  Summing (S_k - k qbar) / k over its positions
    k = a_j+1..A_j, with S_k = P_j + (k - a_j) mu_j, gives
    (P_j - a_j mu_j) h_j + W_j (mu_j - qbar), h_j = H(A_j) - H(a_j) with H the
    harmonic numbers.  The second term sums to zero over blocks, and
    sum_j P_j h_j = sum_j Q_j (H(N) - H(A_j)) because the h_j telescope, so

        total = sum_j Q_j * (H(N) - H(A_j) - a_j h_j / W_j),

    which needs only integer cumulative sums (fast) and no float cumsum.
    """
    order = np.argsort(-key, kind="stable")
    starts = _tie_starts(key[order])
    ws = np.take(w, order, axis=1)
    wb = _block_sums(ws, starts)
    qb = _block_sums(ws * q[order], starts)
    upto = np.cumsum(wb, axis=1)  # A_j
    n_tot = upto[:, -1]
    harmonic = np.empty(int(n_tot.max()) + 1)
    harmonic[0] = 0.0
    np.cumsum(1.0 / np.arange(1, harmonic.size), out=harmonic[1:])
    before = upto - wb  # a_j
    h_upto = harmonic[upto]
    g = harmonic[before]
    np.subtract(h_upto, g, out=g)  # h_j
    g *= before
    g /= np.maximum(wb, 1)  # empty blocks have Q_j = 0
    g += h_upto
    np.subtract(harmonic[n_tot][:, None], g, out=g)
    return np.einsum("ij,ij->i", qb, g) / n_tot


# ---------------------------------------------------------------------------
# agreement
# ---------------------------------------------------------------------------


def cohen_kappa(a: ArrayLike, b: ArrayLike, weights: ArrayLike | None = None) -> FloatOrArray:
    """Cohen's kappa between two raters' categorical labels (unweighted kappa).

    Agreement corrected for the agreement expected from the two raters'
    marginals alone; equals ``sklearn.metrics.cohen_kappa_score``.  Categories
    are the union of the values seen in ``a`` and ``b``.  NaN when expected
    agreement is 1 (both raters use one and the same category), where kappa is
    0/0.  ``weights`` as in :func:`auroc` (items along the only axis).
    """
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    if a_arr.ndim != 1 or a_arr.shape != b_arr.shape:
        raise ValueError("a and b must be 1-D of the same length")
    n = a_arr.size
    if n == 0:
        raise ValueError("cohen_kappa of an empty sample is undefined")
    _, codes = np.unique(np.concatenate([a_arr, b_arr]), return_inverse=True)
    codes = codes.reshape(-1)
    n_cat = int(codes.max()) + 1
    pair = codes[:n] * n_cat + codes[n:]
    if weights is None:
        conf = np.bincount(pair, minlength=n_cat * n_cat)[None, :].astype(np.float64)
    else:
        w = _as_weights(weights, n)
        rows = w.shape[0]
        flat = (pair[None, :] + (n_cat * n_cat) * np.arange(rows)[:, None]).ravel()
        conf = np.bincount(flat, weights=w.ravel(), minlength=rows * n_cat * n_cat).astype(np.float64)
        conf = conf.reshape(rows, n_cat * n_cat)
    conf = conf.reshape(-1, n_cat, n_cat)
    total = conf.sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        p_obs = np.trace(conf, axis1=1, axis2=2) / total
        p_exp = np.einsum("ij,ij->i", conf.sum(axis=2), conf.sum(axis=1)) / total**2
        out = np.where(p_exp < 1.0, (p_obs - p_exp) / (1.0 - p_exp), np.nan)
    return _scalar_or_rows(out, weights is not None)


def fleiss_kappa(
    table: ArrayLike,
    method: Literal["fleiss", "randolph"] = "fleiss",
    weights: ArrayLike | None = None,
) -> FloatOrArray:
    """Fleiss' kappa for many raters, from an items x categories count table.

    Same input and result as ``statsmodels.stats.inter_rater.fleiss_kappa``:
    ``table[i, j]`` is how many raters put item ``i`` in category ``j``, and
    every item must have the same number (>= 2) of raters.  ``method="randolph"``
    uses uniform chance agreement 1/categories (free-marginal kappa) instead of
    the observed category shares.  NaN when chance agreement is 1.  ``weights``
    (b, items) as in :func:`auroc`: items are the rows of ``table``.
    """
    t = _as_float(table, "table")
    if t.ndim != 2 or t.shape[0] == 0:
        raise ValueError("table must be a non-empty 2-D items x categories array")
    if (t < 0).any():
        raise ValueError("table holds counts and cannot be negative")
    raters = t.sum(axis=1)
    m = raters[0]
    if not np.all(raters == m) or m < 2:
        raise ValueError("every item needs the same number (>= 2) of raters")
    per_item = ((t * t).sum(axis=1) - m) / (m * (m - 1.0))
    w: NDArray[Any] = np.ones((1, t.shape[0])) if weights is None else _as_weights(weights, t.shape[0])
    n_items = w.sum(axis=1)
    p_obs = (w @ per_item) / n_items
    if method == "fleiss":
        p_cat = (w @ t) / (n_items * m)[:, None]
        p_exp = (p_cat * p_cat).sum(axis=1)
    elif method == "randolph":
        p_exp = np.full_like(p_obs, 1.0 / t.shape[1])
    else:
        raise ValueError(f"unknown method {method!r}")
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(p_exp < 1.0, (p_obs - p_exp) / (1.0 - p_exp), np.nan)
    return _scalar_or_rows(out, weights is not None)
