"""Tests for sleight.stats: metrics against reference implementations, and the
bootstrap's reproducibility, pairing, cluster handling and coverage."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from sleight.stats import (
    BootstrapCI,
    PairedBootstrap,
    auroc,
    average_ranks,
    bootstrap_ci,
    brier,
    cohen_kappa,
    fleiss_kappa,
    gathered,
    mean,
    paired_bootstrap,
    prr,
    resample,
)
from sleight.stats import bootstrap as bootstrap_module
from tolerances import FLOAT64_ATOL, FLOAT64_RTOL

SEEDS = range(5)


def _binary_labels(rng: np.random.Generator, n: int) -> np.ndarray:
    y = rng.integers(0, 2, n)
    y[0], y[1] = 0, 1  # both classes present
    return y


# ---------------------------------------------------------------------------
# AUROC
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("tied", [False, True])
def test_auroc_matches_sklearn(seed: int, tied: bool) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 300))
    y = _binary_labels(rng, n)
    s = rng.integers(0, 4, n) if tied else rng.normal(size=n)
    assert auroc(s, y) == pytest.approx(metrics.roc_auc_score(y, s), rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)
    assert auroc(s, y.astype(bool)) == pytest.approx(metrics.roc_auc_score(y, s), rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)


def test_auroc_known_values() -> None:
    assert auroc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert auroc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0
    assert auroc([1, 1, 1, 1], [0, 1, 0, 1]) == 0.5  # all tied: one half


def test_auroc_nan_when_a_class_is_empty() -> None:
    assert math.isnan(auroc([0.1, 0.5, 0.9], [1, 1, 1]))
    assert math.isnan(auroc([0.1, 0.5, 0.9], [0, 0, 0]))
    batch = auroc(np.array([[0.1, 0.9], [0.1, 0.9]]), np.array([[0, 1], [1, 1]]))
    assert batch[0] == 1.0 and math.isnan(batch[1])


def test_auroc_rejects_non_binary_labels_and_nan_scores() -> None:
    with pytest.raises(ValueError):
        auroc([0.1, 0.2, 0.3], [0, 1, 2])
    with pytest.raises(ValueError):
        auroc([0.1, np.nan, 0.3], [0, 1, 1])
    with pytest.raises(ValueError):
        auroc([0.1, 0.2], [0, 1, 1])


@pytest.mark.parametrize("tied", [False, True])
def test_auroc_batch_along_last_axis(tied: bool) -> None:
    rng = np.random.default_rng(7)
    s = rng.integers(0, 3, (40, 25)) if tied else rng.normal(size=(40, 25))
    y = rng.integers(0, 2, (40, 25))
    batch = auroc(s, y)
    assert batch.shape == (40,)
    rows = np.array([auroc(s[r], y[r]) for r in range(40)])
    np.testing.assert_array_equal(batch, rows)  # the same arithmetic row by row: bit-identical


def test_average_ranks_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    x = rng.integers(0, 6, (30, 40)).astype(float)
    np.testing.assert_array_equal(average_ranks(x), stats.rankdata(x, axis=-1))
    z = rng.normal(size=50)
    np.testing.assert_array_equal(average_ranks(z), stats.rankdata(z))


# ---------------------------------------------------------------------------
# Brier
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_brier_matches_sklearn(seed: int) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    y = _binary_labels(rng, n)
    p = rng.random(n)
    assert brier(p, y) == pytest.approx(metrics.brier_score_loss(y, p), rel=FLOAT64_RTOL)
    p_tied = rng.integers(0, 5, n) / 4.0
    assert brier(p_tied, y) == pytest.approx(metrics.brier_score_loss(y, p_tied), rel=FLOAT64_RTOL)


def test_brier_batch_and_range_check() -> None:
    rng = np.random.default_rng(0)
    p, y = rng.random((6, 10)), rng.integers(0, 2, (6, 10))
    np.testing.assert_array_equal(brier(p, y), [brier(p[r], y[r]) for r in range(6)])  # bit-identical
    with pytest.raises(ValueError):
        brier([0.2, 1.5], [0, 1])


# ---------------------------------------------------------------------------
# kappas
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_cohen_kappa_matches_sklearn(seed: int) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 300))
    k = int(rng.integers(2, 6))
    a = rng.integers(0, k, n)
    agree = rng.random(n) < 0.6
    b = np.where(agree, a, rng.integers(0, k, n))
    assert cohen_kappa(a, b) == pytest.approx(metrics.cohen_kappa_score(a, b), rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)
    names = np.array(["yes", "no", "maybe", "skip", "other"])
    assert cohen_kappa(names[a], names[b]) == pytest.approx(metrics.cohen_kappa_score(names[a], names[b]), rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)


def test_cohen_kappa_known_values() -> None:
    assert cohen_kappa([0, 1, 0, 1], [0, 1, 0, 1]) == 1.0
    assert math.isnan(cohen_kappa([2, 2, 2], [2, 2, 2]))  # chance agreement 1: 0/0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", ["fleiss", "randolph"])
def test_fleiss_kappa_matches_statsmodels(seed: int, method: str) -> None:
    inter_rater = pytest.importorskip("statsmodels.stats.inter_rater")
    rng = np.random.default_rng(seed)
    items, cats, raters = int(rng.integers(3, 80)), int(rng.integers(2, 6)), int(rng.integers(2, 9))
    # raters lean towards an item-specific category so kappa is away from 0
    lean = rng.integers(0, cats, items)
    probs = np.full((items, cats), 0.4 / cats)
    probs[np.arange(items), lean] += 0.6
    table = np.stack([rng.multinomial(raters, row) for row in probs])
    expected = inter_rater.fleiss_kappa(table, method=method)
    assert fleiss_kappa(table, method=method) == pytest.approx(expected, rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)


def test_fleiss_kappa_needs_equal_rater_counts() -> None:
    with pytest.raises(ValueError):
        fleiss_kappa([[2, 1], [1, 1]])


# ---------------------------------------------------------------------------
# PRR
# ---------------------------------------------------------------------------


def _prr_loop(confidence: np.ndarray, quality: np.ndarray) -> float:
    """The rejection-curve definition, item by item, for distinct confidences."""
    n = len(quality)

    def area(order: list[int]) -> float:
        total = 0.0
        for k in range(n):  # rejection fraction k/n: drop the k least confident
            retained = order[: n - k]
            total += sum(quality[i] for i in retained) / len(retained)
        return total / n

    model = area(sorted(range(n), key=lambda i: -confidence[i]))
    oracle = area(sorted(range(n), key=lambda i: -quality[i]))
    random = sum(quality) / n
    return (model - random) / (oracle - random)


@pytest.mark.parametrize("seed", SEEDS)
def test_prr_matches_loop_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 120))
    c = rng.normal(size=n)
    q = rng.random(n)
    assert prr(c, q) == pytest.approx(_prr_loop(c, q), rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)
    q01 = (rng.random(n) < 0.5).astype(float)
    q01[0], q01[1] = 0.0, 1.0
    assert prr(c, q01) == pytest.approx(_prr_loop(c, q01), rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)


def test_prr_ties_average_over_tie_orders() -> None:
    rng = np.random.default_rng(11)
    c = np.array([3, 1, 3, 2, 1, 3, 1, 2])
    q = rng.random(c.size)
    blocks = [np.flatnonzero(c == v) for v in sorted(set(c.tolist()), reverse=True)]
    values = []
    for perms in itertools.product(*(itertools.permutations(b) for b in blocks)):
        order = [i for block in perms for i in block]
        # distinct confidences that realise this order
        c_order = np.empty(c.size)
        c_order[order] = np.arange(c.size, 0, -1)
        values.append(_prr_loop(c_order, q))
    assert prr(c, q) == pytest.approx(float(np.mean(values)), rel=FLOAT64_RTOL)


def test_prr_exact_zero_one_and_sign() -> None:
    rng = np.random.default_rng(5)
    q = rng.random(200)
    assert prr(np.full(200, 0.3), q) == 0.0  # all tied: exactly random
    assert prr(q, q) == 1.0  # oracle
    assert prr(2.0 * q + 1.0, q) == 1.0  # any increasing transform is the oracle
    q_tied = rng.integers(0, 3, 200).astype(float)
    assert prr(q_tied, q_tied) == 1.0
    assert prr(np.zeros(200), q_tied) == 0.0
    assert prr(-q, q) < 0.0  # worse than random
    assert math.isnan(prr(rng.random(10), np.ones(10)))  # constant quality: 0/0
    # the same holds replicate by replicate in the weighted (bootstrap) form
    counts = resample(200, B=50, seed=0).counts
    assert (prr(np.full(200, 0.3), q, weights=counts) == 0.0).all()
    assert (prr(q, q, weights=counts) == 1.0).all()
    assert (prr(q_tied, q_tied, weights=counts) == 1.0).all()


def test_prr_batch_along_last_axis() -> None:
    rng = np.random.default_rng(2)
    c, q = rng.integers(0, 4, (12, 30)), rng.random((12, 30))
    np.testing.assert_array_equal(prr(c, q), [prr(c[r], q[r]) for r in range(12)])  # bit-identical


# ---------------------------------------------------------------------------
# weighted (replicate) forms: weights = counts = the expanded data set
# ---------------------------------------------------------------------------


def _expanded_cases(rng: np.random.Generator):
    n = 37
    y = _binary_labels(rng, n)
    y[2], y[3] = 0, 1
    cont, tied = rng.normal(size=n), rng.integers(0, 4, n).astype(float)
    p, q = rng.random(n), rng.random(n)
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.5, a, rng.integers(0, 3, n))
    table = np.stack([rng.multinomial(5, [0.5, 0.3, 0.2]) for _ in range(n)])
    return [
        (auroc, (cont, y)),
        (auroc, (tied, y)),
        (brier, (p, y)),
        (mean, (q,)),
        (prr, (cont, q)),
        (prr, (tied, q)),
        (prr, (tied, rng.integers(0, 2, n).astype(float))),
        (cohen_kappa, (a, b)),
        (fleiss_kappa, (table,)),
    ]


def test_weighted_equals_expanded_data() -> None:
    rng = np.random.default_rng(0)
    for stat, arrays in _expanded_cases(rng):
        n = len(arrays[0])
        counts = rng.integers(0, 4, (25, n))
        counts[:, :4] += 1  # keep both classes and both labels
        got = stat(*arrays, weights=counts)
        assert got.shape == (25,)
        for r in range(25):
            expanded = [np.repeat(x, counts[r], axis=0) for x in arrays]
            assert got[r] == pytest.approx(stat(*expanded), rel=FLOAT64_RTOL, abs=FLOAT64_ATOL), stat.__name__
        # float weights (whole numbers) give the same values as integer ones
        np.testing.assert_array_equal(stat(*arrays, weights=counts.astype(float)), got)  # bit-identical
        # all-ones weights give the plain statistic
        assert stat(*arrays, weights=np.ones((1, n), int))[0] == pytest.approx(stat(*arrays), rel=FLOAT64_RTOL, abs=FLOAT64_ATOL)


def test_weighted_auroc_nan_for_replicate_without_a_class() -> None:
    s, y = np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])
    out = auroc(s, y, weights=[[1, 1, 0, 0], [1, 0, 1, 0]])
    assert math.isnan(out[0]) and out[1] == 1.0


def test_gathered_adapter_matches_native_weighted() -> None:
    rng = np.random.default_rng(4)
    n = 60
    s, y, q = rng.integers(0, 5, n).astype(float), _binary_labels(rng, n), rng.random(n)
    clusters = np.repeat(np.arange(15), rng.integers(1, 8, 15))[:n]
    clusters = np.concatenate([clusters, np.full(n - clusters.size, 99)])
    counts = resample(n, B=300, seed=1, clusters=clusters).counts
    assert np.unique(counts.sum(axis=1)).size > 1  # replicate sizes differ
    for stat, arrays in [(auroc, (s, y)), (brier, (q, y)), (prr, (s, q))]:
        np.testing.assert_allclose(gathered(stat)(*arrays, weights=counts), stat(*arrays, weights=counts), rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL)
    sample_mean = gathered(lambda x: x.mean(axis=-1))
    np.testing.assert_allclose(sample_mean(q, weights=counts), mean(q, weights=counts), rtol=FLOAT64_RTOL)
    assert sample_mean(q) == pytest.approx(q.mean())


# ---------------------------------------------------------------------------
# bootstrap
# ---------------------------------------------------------------------------


def _auroc_data(rng: np.random.Generator, n_pos: int, n_neg: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    scores = np.concatenate([rng.normal(shift, 1.0, n_pos), rng.normal(0.0, 1.0, n_neg)])
    labels = np.concatenate([np.ones(n_pos, int), np.zeros(n_neg, int)])
    return scores, labels


def test_bootstrap_reproducible_with_seed() -> None:
    s, y = _auroc_data(np.random.default_rng(0), 60, 80, 0.7)
    first = bootstrap_ci(auroc, s, y, B=3000, seed=123)
    second = bootstrap_ci(auroc, s, y, B=3000, seed=123)
    other = bootstrap_ci(auroc, s, y, B=3000, seed=124)
    assert isinstance(first, BootstrapCI)
    assert (first.low, first.high, first.estimate) == (second.low, second.high, second.estimate)
    np.testing.assert_array_equal(first.replicates, second.replicates)
    assert not np.array_equal(first.replicates, other.replicates)
    assert first.estimate == auroc(s, y)
    assert first.low < first.estimate < first.high
    assert first.B == 3000 and first.level == 0.95 and first.n_invalid == 0


def test_bootstrap_replicates_are_the_resample_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    s, y = _auroc_data(np.random.default_rng(1), 30, 30, 0.5)
    rs = resample(s.size, B=500, seed=9)
    expected = auroc(s, y, weights=rs.counts)
    ci = bootstrap_ci(auroc, s, y, B=500, seed=9)
    np.testing.assert_array_equal(ci.replicates, expected)
    # processing chunk size does not change the random stream
    monkeypatch.setattr(bootstrap_module, "_CHUNK_CELLS", 7)
    np.testing.assert_array_equal(bootstrap_ci(auroc, s, y, B=500, seed=9).replicates, expected)
    lo, hi = np.quantile(expected, [0.025, 0.975])
    assert (ci.low, ci.high) == (lo, hi)


def test_bootstrap_drops_and_counts_nan_replicates() -> None:
    s = np.linspace(0.0, 1.0, 12)
    y = np.zeros(12, int)
    y[-1] = 1  # one positive: many replicates lose it
    ci = bootstrap_ci(auroc, s, y, B=2000, seed=0)
    assert 0 < ci.n_invalid < 2000
    assert ci.n_invalid == int(np.isnan(ci.replicates).sum())
    assert not math.isnan(ci.low) and not math.isnan(ci.high)


def test_bootstrap_input_validation() -> None:
    x = np.arange(10.0)
    with pytest.raises(ValueError):
        bootstrap_ci(mean, x, B=0)
    with pytest.raises(ValueError):
        bootstrap_ci(mean, x, level=1.0)
    with pytest.raises(ValueError):
        bootstrap_ci(auroc, x, np.zeros(9))
    with pytest.raises(ValueError):
        bootstrap_ci(mean, x, clusters=np.zeros(9))
    with pytest.raises(ValueError):
        bootstrap_ci(gathered(lambda v: v.mean()), x, B=10)  # not batched: wrong shape


@pytest.mark.slow
def test_coverage_of_auroc_interval() -> None:
    """About 95% of 95% intervals contain the true AUROC, Phi(shift / sqrt 2)."""
    rng = np.random.default_rng(2024)
    shift = 1.0
    truth = 0.5 * (1.0 + math.erf(shift / 2.0))  # Phi(shift / sqrt(2))
    hits = 0
    for _ in range(200):
        s, y = _auroc_data(rng, 100, 100, shift)
        ci = bootstrap_ci(auroc, s, y, B=2000, seed=int(rng.integers(2**31)))
        hits += ci.low <= truth <= ci.high
    assert 0.90 <= hits / 200 <= 0.99


def _clustered_sample(rng: np.random.Generator, n_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    sizes = rng.integers(1, 12, n_clusters)
    effects = rng.normal(0.0, 1.0, n_clusters)
    clusters = np.repeat(np.arange(n_clusters), sizes)
    values = effects[clusters] + rng.normal(0.0, 0.5, clusters.size)
    return values, clusters


@pytest.mark.slow
def test_coverage_of_cluster_interval_and_item_undercoverage() -> None:
    """Strongly clustered data with unequal cluster sizes: the cluster bootstrap
    covers the true mean (0) at about the nominal rate; item resampling, which
    ignores the clustering, does not."""
    rng = np.random.default_rng(77)
    cluster_hits = item_hits = 0
    for _ in range(200):
        values, clusters = _clustered_sample(rng, 60)
        seed = int(rng.integers(2**31))
        by_cluster = bootstrap_ci(mean, values, B=2000, seed=seed, clusters=clusters)
        by_item = bootstrap_ci(mean, values, B=2000, seed=seed)
        cluster_hits += by_cluster.low <= 0.0 <= by_cluster.high
        item_hits += by_item.low <= 0.0 <= by_item.high
    assert 0.90 <= cluster_hits / 200 <= 0.99
    assert item_hits / 200 < 0.80


def test_cluster_resampling_keeps_clusters_whole() -> None:
    rng = np.random.default_rng(5)
    sizes = np.array([1, 2, 3, 5, 8, 13, 4])
    labels = np.array(list("abcdefg"))
    clusters = rng.permutation(np.repeat(labels, sizes))  # members scattered
    n = clusters.size
    rs = resample(n, B=400, seed=3, clusters=clusters)
    assert rs.draws.shape == (400, 7)  # G clusters drawn per replicate
    counts = rs.counts
    codes = np.unique(clusters, return_inverse=True)[1]
    drawn = np.stack([np.bincount(d, minlength=7) for d in rs.draws])
    # every item of a cluster appears exactly as often as its cluster was drawn
    np.testing.assert_array_equal(counts, drawn[:, codes])
    np.testing.assert_array_equal(counts.sum(axis=1), drawn @ sizes[np.argsort(labels)])
    assert np.unique(counts.sum(axis=1)).size > 1  # unequal sizes: replicate sizes vary
    for r in range(20):
        idx = rs.indices(r)
        np.testing.assert_array_equal(np.bincount(idx, minlength=n), counts[r])
        # the index list is a concatenation of whole clusters, in draw order
        pos = 0
        for g in rs.draws[r]:
            members = np.flatnonzero(codes == g)
            np.testing.assert_array_equal(np.sort(idx[pos : pos + members.size]), members)
            pos += members.size
        assert pos == idx.size


def test_item_resampling_is_cluster_resampling_with_singletons() -> None:
    a = resample(50, B=200, seed=8)
    b = resample(50, B=200, seed=8, clusters=np.arange(50))
    np.testing.assert_array_equal(a.counts, b.counts)
    assert (a.counts.sum(axis=1) == 50).all()


def test_paired_bootstrap_uses_the_same_replicates_for_both_readouts() -> None:
    rng = np.random.default_rng(6)
    s_a, y = _auroc_data(rng, 40, 50, 0.8)
    s_b = s_a + rng.normal(0.0, 1.0, s_a.size)
    clusters = rng.integers(0, 25, s_a.size)
    seen: dict[str, list[np.ndarray]] = {"a": [], "b": []}

    def spy(scores, labels, weights=None):
        if weights is not None:
            seen["a" if scores is s_a_arr else "b"].append(np.array(weights))
        return auroc(scores, labels, weights=weights)

    s_a_arr = np.asarray(s_a)
    res = paired_bootstrap(spy, (s_a_arr, y), (s_b, y), clusters=clusters, B=1500, seed=4, return_resample=True)
    assert isinstance(res, PairedBootstrap)
    counts_a, counts_b = np.concatenate(seen["a"]), np.concatenate(seen["b"])
    np.testing.assert_array_equal(counts_a, counts_b)
    np.testing.assert_array_equal(counts_a, res.resample.counts)
    np.testing.assert_array_equal(res.resample.draws, resample(s_a.size, 1500, 4, clusters).draws)
    # whole clusters in every replicate
    codes = np.unique(clusters, return_inverse=True)[1]
    for g in range(codes.max() + 1):
        members = counts_a[:, codes == g]
        assert (members == members[:, :1]).all()
    # diff replicates are the per-replicate differences, intervals from them
    np.testing.assert_array_equal(res.ci_diff.replicates, res.ci_a.replicates - res.ci_b.replicates)
    assert res.estimate_a == auroc(s_a, y) and res.estimate_b == auroc(s_b, y)
    assert res.diff == res.estimate_a - res.estimate_b
    assert res.ci_a.replicates.shape == (1500,)
    single = bootstrap_ci(auroc, s_a, y, B=1500, seed=4, clusters=clusters)
    np.testing.assert_array_equal(single.replicates, res.ci_a.replicates)


def test_paired_bootstrap_identical_readouts_give_zero_difference() -> None:
    rng = np.random.default_rng(8)
    c, q = rng.random(80), rng.random(80)
    res = paired_bootstrap(prr, (c, q), (c.copy(), q.copy()), B=500, seed=1)
    assert res.diff == 0.0
    assert (res.ci_diff.replicates == 0.0).all()
    assert res.ci_diff.low == res.ci_diff.high == 0.0


def test_paired_difference_interval_is_narrower_for_correlated_readouts() -> None:
    rng = np.random.default_rng(9)
    s_a, y = _auroc_data(rng, 80, 80, 1.0)
    s_b = s_a + rng.normal(0.0, 0.3, s_a.size)  # strongly correlated readouts
    res = paired_bootstrap(auroc, (s_a, y), (s_b, y), B=3000, seed=2)
    width_diff = res.ci_diff.high - res.ci_diff.low
    assert width_diff < 0.5 * (res.ci_a.high - res.ci_a.low)
    # a bare array counts as a one-element input tuple
    q_a, q_b = rng.random(50), rng.random(50)
    bare = paired_bootstrap(mean, q_a, q_b, B=200, seed=0)
    assert bare.estimate_a == pytest.approx(q_a.mean())


def test_paired_bootstrap_fresh_seed_returns_the_resample_it_used() -> None:
    rng = np.random.default_rng(10)
    q_a, q_b = rng.random(40), rng.random(40)
    res = paired_bootstrap(mean, q_a, q_b, B=300, seed=None, return_resample=True)
    np.testing.assert_array_equal(res.ci_a.replicates, mean(q_a, weights=res.resample.counts))
    np.testing.assert_array_equal(res.ci_b.replicates, mean(q_b, weights=res.resample.counts))


def test_weights_must_be_non_negative_counts() -> None:
    with pytest.raises(ValueError):
        mean([1.0, 2.0], weights=[[1, -1]])
    with pytest.raises(ValueError):
        prr([0.1, 0.2], [0.3, 0.4], weights=[[0.5, 1.5]])
