"""Does a score rank its target? Metrics with intervals and paired differences, as frozen records.

The downstream commands (``sleight readout forecast`` / ``ptrue``) score several readouts of the same
items against one binary target. This module turns arrays into frozen records using
:mod:`sleight.stats` only: a percentile (cluster) bootstrap interval per metric
(:class:`MetricInterval`), and for every comparison a *paired* bootstrap (:class:`PairedDifference`),
both readouts resampled on the same replicates, because the two readouts share their items and
comparing two separate intervals would overstate the uncertainty of the difference. Each record's
``as_json`` is the JSON object summary.json has always held (its keys in their order) and
``from_json`` reads one back; :func:`clean` writes records nested anywhere in a summary as that JSON.
Pure functions; no model, no I/O.
"""

from __future__ import annotations

import functools
import itertools
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sleight.stats import auroc, bootstrap_ci, brier, paired_bootstrap, prr

Metric = Literal["auroc", "brier", "prr", "prr_0.5"]

# Each metric as a batched statistic of (score, label) plus the direction that counts as better.
# ``prr_0.5`` is the rejection curve up to a 50% rejection rate (lm-polygraph's
# ``PredictionRejectionArea(max_rejection=0.5)``, see :func:`sleight.stats.metrics.prr`).
METRICS: dict[str, tuple[Callable[..., Any], str]] = {
    "auroc": (auroc, "higher"),
    "brier": (brier, "lower"),
    "prr": (prr, "higher"),
    "prr_0.5": (functools.partial(prr, max_rejection=0.5), "higher"),
}


def _num(v: Any) -> float:
    """A float of a record read back from JSON, where null is the NaN :func:`clean` wrote as null."""
    return math.nan if v is None else float(v)


@dataclass(frozen=True)
class JsonRecord:
    """A frozen record of this module: ``as_json`` is its JSON object, which :func:`clean` writes
    wherever the record sits in a summary (so the summaries' files keep their shape).

    By default that object is the record's fields, their names and order the keys, and ``from_json``
    reads one back field by field (:func:`_field`); a record whose JSON has another shape overrides
    both."""

    def as_json(self) -> Mapping[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls: type[R], d: Mapping[str, Any]) -> R:
        types = typing.get_type_hints(cls)
        return cls(**{f.name: _field(d, f.name, types[f.name]) for f in fields(cls)})


R = TypeVar("R", bound=JsonRecord)
_READ: dict[object, Callable[[Any], object]] = {int: int, float: _num, str: str, bool: bool}


def _field(d: Mapping[str, Any], key: str, kind: object) -> object:
    """One field of a record read back from JSON by its type: a float's null is the NaN :func:`clean`
    wrote, an ``int | None`` (a count that may be missing) is taken as it is, absent as None."""
    if kind == int | None:
        return d.get(key)
    return _read(d[key], key, kind)


def _read(v: Any, key: str, kind: object) -> object:
    """One JSON value by its type: a scalar, a nested record, ``X | None``, or a mapping of either."""
    if kind in _READ:
        return _READ[kind](v)
    args = typing.get_args(kind)
    if type(None) in args and len(args) == 2:
        return None if v is None else _read(v, key, next(a for a in args if a is not type(None)))
    if typing.get_origin(kind) in (Mapping, dict):
        return {str(k): _read(x, key, args[1]) for k, x in v.items()}
    if isinstance(kind, type) and issubclass(kind, JsonRecord):
        return kind.from_json(v)
    raise TypeError(f"{key}: a field of type {kind} has no default JSON reading")


@dataclass(frozen=True)
class MetricInterval(JsonRecord):
    """One metric of a score against a 0/1 target with its percentile bootstrap interval, as
    :func:`metric_interval` computes it; field names and order are summary.json's keys. An undefined
    estimate (one class only) has NaN bounds and ``n_invalid`` None: no interval was computed."""

    metric: str
    better: str  # "higher" or "lower"
    n: int
    estimate: float
    low: float
    high: float
    B: int
    level: float
    n_invalid: int | None

    @classmethod
    def bootstrapped(
        cls: type[M], metric: str, better: str, stat: Callable[..., Any], arrays: tuple[np.ndarray, ...],
        *, B: int, seed: int, level: float, clusters: ArrayLike | None,
    ) -> M:
        """``stat`` of ``arrays`` (one row per item) with its percentile (cluster) bootstrap interval;
        an undefined estimate (one class only) gets NaN bounds and no interval rather than one for an
        undefined value."""
        n, estimate = int(arrays[0].size), float(stat(*arrays))
        if not math.isfinite(estimate):
            return cls(metric, better, n, estimate, math.nan, math.nan, B, level, None)
        ci = bootstrap_ci(stat, *arrays, B=B, seed=seed, level=level, clusters=clusters)
        return cls(metric, better, n, estimate, ci.low, ci.high, B, level, ci.n_invalid)


M = TypeVar("M", bound=MetricInterval)


@dataclass(frozen=True)
class PairedDifference(JsonRecord):
    """``metric(a) - metric(b)`` on the same items with its paired bootstrap interval, as
    :func:`paired_difference` computes it; field names and order are summary.json's keys. ``gain``
    (with ``gain_low``/``gain_high``) is the difference signed so that positive means ``a`` is better."""

    metric: str
    a: str
    b: str
    better: str
    n: int
    B: int
    level: float
    estimate_a: float
    estimate_b: float
    diff: float
    low: float
    high: float
    gain: float
    gain_low: float
    gain_high: float
    n_invalid: int | None


@dataclass(frozen=True)
class MassSummary(JsonRecord):
    """Option-mass diagnostics of one scored position (:func:`mass_summary`); field names and order
    are summary.json's keys. ``median``/``min`` are NaN when no mass is defined."""

    n: int
    n_defined: int
    n_boundary_not_preserved: int
    median: float
    min: float
    below_floor: int
    floor: float
    collapsed: bool


@dataclass(frozen=True)
class LetterAuroc(JsonRecord):
    """AUROC on the items of one gold letter (:func:`per_letter_auroc`): ``n`` items, ``n_positive``
    of them labelled 1; ``auroc`` NaN when the letter has one class only."""

    n: int
    n_positive: int
    auroc: float


@dataclass(frozen=True)
class AnswerLetterInterval(MetricInterval):
    """App. E's answer-letter AUROC with its percentile interval (:func:`answer_letter_auroc_interval`).
    Its JSON has no ``better`` (an AUROC's is higher) and, where the estimate is undefined, no
    ``n_invalid`` key."""

    def as_json(self) -> dict[str, object]:
        return {k: v for k, v in super().as_json().items() if k != "better" and not (k == "n_invalid" and v is None)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AnswerLetterInterval:
        return super().from_json({"better": "higher", **d})


@dataclass(frozen=True)
class LooInterval(JsonRecord):
    """One checkpoint left out (:func:`leave_one_out_intervals`): the mean of the others' estimates
    and the percentile interval of their per-replicate means."""

    estimate: float
    low: float
    high: float


@dataclass(frozen=True)
class LeaveOneOut(JsonRecord):
    """An aggregate over checkpoints and the same aggregate with each one left out (:func:`leave_one_out`).

    ``all`` and ``without``'s values are numbers, or arrays for array values (then ``min``, ``max``
    and ``max_shift`` are None and not in the JSON); ``intervals``, where a caller adds them
    (:func:`leave_one_out_intervals`), come last in the JSON."""

    n_checkpoints: int
    all: float | NDArray[np.float64]
    without: Mapping[str, float | NDArray[np.float64]]
    min: float | None = None
    max: float | None = None
    max_shift: float | None = None
    intervals: Mapping[str, LooInterval] | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"n_checkpoints": self.n_checkpoints, "all": self.all, "without": dict(self.without)}
        if self.max_shift is not None:
            out.update(min=self.min, max=self.max, max_shift=self.max_shift)
        if self.intervals is not None:
            out["intervals"] = {k: v.as_json() for k, v in self.intervals.items()}
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LeaveOneOut:
        def value(v: Any) -> float | NDArray[np.float64]:
            return np.asarray(v, dtype=np.float64) if isinstance(v, list) else _num(v)

        intervals = d.get("intervals")
        return cls(
            int(d["n_checkpoints"]), value(d["all"]), {k: value(v) for k, v in d["without"].items()},
            d.get("min"), d.get("max"), d.get("max_shift"),
            None if intervals is None else {k: LooInterval.from_json(v) for k, v in intervals.items()},
        )


def clean(x: Any) -> Any:
    """JSON-safe value: NaN/inf become None (JSON has no NaN), numpy scalars become Python ones,
    a record of this module its ``as_json`` object."""
    if isinstance(x, JsonRecord):
        return clean(x.as_json())
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _arrays(scores: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError(f"scores and labels must be 1-D of one length, got {s.shape} and {y.shape}")
    return s, y


def metric_interval(
    metric: Metric,
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    clusters: ArrayLike | None = None,
    B: int = 20000,
    seed: int = 0,
    level: float = 0.95,
) -> MetricInterval:
    """One metric of ``scores`` against 0/1 ``labels`` with its percentile bootstrap interval.

    The estimate is NaN (JSON null) when the metric is undefined on the sample (AUROC or PRR with
    only one class); then no interval is computed rather than reporting one for an undefined value.
    """
    fn, better = METRICS[metric]
    return MetricInterval.bootstrapped(metric, better, fn, _arrays(scores, labels), B=B, seed=seed, level=level, clusters=clusters)


def paired_difference(
    metric: Metric,
    scores_a: ArrayLike,
    scores_b: ArrayLike,
    labels: ArrayLike,
    *,
    clusters: ArrayLike | None = None,
    B: int = 20000,
    seed: int = 0,
    level: float = 0.95,
    name_a: str = "a",
    name_b: str = "b",
) -> PairedDifference:
    """``metric(a) - metric(b)`` on the same items, with the paired (cluster) bootstrap interval.

    ``gain`` restates the difference so that positive always means ``a`` is better (for Brier,
    lower is better, so the gain is ``brier(b) - brier(a)``).
    """
    fn, better = METRICS[metric]
    a, y = _arrays(scores_a, labels)
    b, _ = _arrays(scores_b, labels)
    head = (metric, name_a, name_b, better, int(y.size), B, level)
    est_a, est_b = float(fn(a, y)), float(fn(b, y))
    if not (math.isfinite(est_a) and math.isfinite(est_b)):
        nan = math.nan
        return PairedDifference(
            *head, estimate_a=est_a, estimate_b=est_b, diff=nan, low=nan, high=nan, gain=nan, gain_low=nan, gain_high=nan,
            n_invalid=None,
        )
    pb = paired_bootstrap(fn, (a, y), (b, y), clusters=clusters, B=B, seed=seed, level=level)
    sign = 1.0 if better == "higher" else -1.0
    lo, hi = sorted((sign * pb.ci_diff.low, sign * pb.ci_diff.high))
    return PairedDifference(
        *head,
        estimate_a=pb.estimate_a,
        estimate_b=pb.estimate_b,
        diff=pb.diff,
        low=pb.ci_diff.low,
        high=pb.ci_diff.high,
        gain=sign * pb.diff,
        gain_low=lo,
        gain_high=hi,
        n_invalid=pb.ci_diff.n_invalid,
    )


def mass_summary(masses: Sequence[float | None], floor: float = 0.5) -> MassSummary:
    """Option-mass diagnostics of one scored position: median, minimum, below-floor count.

    A mass of ``None`` means the option boundary was not preserved (no mass is defined there); such
    items are counted, never treated as 0.
    """
    vals = np.asarray([m for m in masses if m is not None and not (isinstance(m, float) and math.isnan(m))], dtype=np.float64)
    n_none = len(masses) - vals.size
    return MassSummary(
        n=len(masses),
        n_defined=int(vals.size),
        n_boundary_not_preserved=int(n_none),
        median=float(np.median(vals)) if vals.size else math.nan,
        min=float(vals.min()) if vals.size else math.nan,
        below_floor=int((vals < floor).sum()),
        floor=floor,
        collapsed=bool(vals.size and float(np.median(vals)) < floor),
    )


def counts(values: Sequence[Any]) -> dict[str, int]:
    """How often each value occurs, most common first (for argmax classes and letters)."""
    keys, n = np.unique(np.asarray([str(v) for v in values], dtype=object), return_counts=True)
    order = np.argsort(-n, kind="stable")
    return {str(keys[i]): int(n[i]) for i in order}


def cluster_codes(keys: Sequence[Any]) -> np.ndarray:
    """Integer cluster labels, in order of first appearance (items sharing a key share a cluster)."""
    seen: dict[Any, int] = {}
    return np.asarray([seen.setdefault(k, len(seen)) for k in keys], dtype=np.int64)


def all_pairs(
    metric: Metric,
    scores: Mapping[str, ArrayLike],
    labels: ArrayLike,
    *,
    clusters: ArrayLike | None = None,
    B: int = 20000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, PairedDifference]:
    """:func:`paired_difference` for every pair of readouts (``"a - b"``, ``a`` before ``b`` in
    the mapping's order), each on the same items and the same replicates (one seed), not only
    against one reference readout."""
    return {
        f"{a} - {b}": paired_difference(metric, scores[a], scores[b], labels, clusters=clusters, B=B, seed=seed, level=level, name_a=a, name_b=b)
        for a, b in itertools.combinations(list(scores), 2)
    }


def per_letter_auroc(
    scores: ArrayLike, labels: ArrayLike, gold_letters: Sequence[str], letters: Sequence[str] = ("A", "B", "C", "D")
) -> dict[str, LetterAuroc]:
    """AUROC of ``scores`` against ``labels`` on the items of each gold letter separately.

    A score that merely tracks which letter is gold (a position bias of the reader or of the
    scored position) ranks well overall and at chance within a letter. Per letter: ``n`` items,
    ``n_positive`` of them labelled 1, and ``auroc`` (NaN when the letter has only one class).
    """
    s, y = _arrays(scores, labels)
    g = np.asarray(list(gold_letters), dtype=object)
    if g.shape != s.shape:
        raise ValueError(f"one gold letter per item: {g.shape} letters for {s.shape} scores")
    out: dict[str, LetterAuroc] = {}
    for letter in letters:
        m = g == letter
        n_pos = int(y[m].sum())
        defined = 0 < n_pos < int(m.sum())
        out[letter] = LetterAuroc(int(m.sum()), n_pos, float(auroc(s[m], y[m])) if defined else math.nan)
    return out


def answer_letter_auroc(scores: Any, labels: Any, letters: Any, weights: Any = None) -> Any:
    """App. E's per-letter AUROC: AUROC within each *answer* letter (the letter of the model's own
    answer, not the gold one), the letters' AUROCs averaged with weights equal to their numbers of
    correct-incorrect pairs. So a score that only tracks which letter was answered counts for
    nothing. ``letters`` holds one code per item (e.g. 0-3; NaN or negative: no letter, left out).
    Batched like :func:`sleight.stats.auroc`: with a ``(b, n)`` count matrix, one value per
    replicate. NaN where no letter has both classes."""
    s, y = _arrays(scores, labels)
    g = np.asarray(letters, dtype=np.float64)
    if g.shape != s.shape:
        raise ValueError(f"one letter per item: {g.shape} letters for {s.shape} scores")
    codes = [c for c in np.unique(g[np.isfinite(g)]) if c >= 0]
    if weights is None:
        num = den = 0.0
        for c in codes:
            m = g == c
            pairs = float(y[m].sum() * (1.0 - y[m]).sum())
            if pairs > 0:
                num += pairs * float(auroc(s[m], y[m]))
                den += pairs
        return num / den if den > 0 else math.nan
    w = np.asarray(weights)
    num_b = np.zeros(w.shape[0])
    den_b = np.zeros(w.shape[0])
    for c in codes:
        m = g == c
        wm = w[:, m]
        pairs = (wm * y[m]).sum(axis=1) * (wm * (1.0 - y[m])).sum(axis=1)
        if not pairs.any():
            continue
        a = np.asarray(auroc(s[m], y[m], wm), dtype=np.float64)
        ok = pairs > 0
        num_b[ok] += pairs[ok] * a[ok]
        den_b[ok] += pairs[ok]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den_b > 0, num_b / np.where(den_b > 0, den_b, 1.0), np.nan)


def _answer_letter_stat(*arrays: Any, weights: Any = None) -> Any:
    scores, labels, letters = arrays
    return answer_letter_auroc(scores, labels, letters, weights)


def answer_letter_auroc_interval(
    scores: ArrayLike, labels: ArrayLike, letters: ArrayLike, *, B: int = 10000, seed: int = 0, level: float = 0.95, clusters: ArrayLike | None = None
) -> AnswerLetterInterval:
    """:func:`answer_letter_auroc` with its percentile item-bootstrap interval (App. E)."""
    s, y = _arrays(scores, labels)
    arrays = (s, y, np.asarray(letters, dtype=np.float64))
    return AnswerLetterInterval.bootstrapped(
        "answer_letter_auroc", "higher", _answer_letter_stat, arrays, B=B, seed=seed, level=level, clusters=clusters
    )


def log_median(values: Sequence[float | None]) -> float:
    """Table 11's median: ``10 ** median(log10 mu)`` over the positive values (an even count takes the
    mean of the two middle logs: linear interpolation on the log scale). NaN when none is positive."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v) and v > 0], dtype=np.float64)
    return float(10.0 ** np.median(np.log10(x))) if x.size else math.nan


def constant_brier(labels: ArrayLike, constant: float | None = None) -> float:
    """Table 12's baselines: the Brier score of one constant forecast on these rows; ``None``: the
    fitted constant, the rows' own correctness rate (whose Brier is ``p(1 - p)``)."""
    y = np.asarray(labels, dtype=np.float64)
    if not y.size:
        return math.nan
    c = float(y.mean()) if constant is None else float(constant)
    return float(np.mean((c - y) ** 2))


def stratified_excess(hits: ArrayLike, group: ArrayLike, strata: Sequence[Any]) -> float:
    """App. E's excess errors: within each stratum, the group's hits minus what the other rows' hit
    rate predicts for the group's size, summed over strata (a stratum with no other rows adds nothing
    it could predict, so it is left out). NaN when no stratum has both."""
    h, g = np.asarray(hits, dtype=np.float64), np.asarray(group, dtype=bool)
    s = np.asarray(strata, dtype=object)
    total, seen = 0.0, False
    for level in dict.fromkeys(s.tolist()):
        here = s == level
        inside, other = here & g, here & ~g
        if not inside.any() or not other.any():
            continue
        total += float(h[inside].sum() - inside.sum() * h[other].mean())
        seen = True
    return total if seen else math.nan


def leave_one_out_intervals(replicates: Mapping[str, Any], estimates: Mapping[str, float], level: float = 0.95) -> dict[str, LooInterval]:
    """Leave-one-checkpoint-out with intervals (App. E): for each checkpoint, the mean of the others'
    estimates and the percentile interval of the others' per-replicate means, every checkpoint's
    replicates drawn on the same resampled items."""
    names = list(estimates)
    if len(names) < 2:
        raise ValueError("leave-one-out needs at least two checkpoints")
    alpha = (1.0 - level) / 2.0
    out: dict[str, LooInterval] = {}
    for k in names:
        rest = [m for m in names if m != k]
        reps = np.mean(np.stack([np.asarray(replicates[m], dtype=np.float64) for m in rest]), axis=0)
        ok = reps[np.isfinite(reps)]
        lo, hi = (float(v) for v in np.quantile(ok, [alpha, 1.0 - alpha])) if ok.size else (math.nan, math.nan)
        out[k] = LooInterval(float(np.mean([estimates[m] for m in rest])), lo, hi)
    return out


def leave_one_out(values: Mapping[str, Any], aggregate: Callable[..., Any] | None = None) -> LeaveOneOut:
    """An aggregate over checkpoints, and the same aggregate recomputed with each one left out.

    ``values`` maps a checkpoint to its number (or to an array of numbers, e.g. its bootstrap
    replicates on shared replicates; then the aggregate is taken element-wise along the checkpoints).
    ``aggregate`` reduces a (checkpoints, ...) array along axis 0 (default: the mean). Returns
    ``all``, ``without`` (checkpoint -> aggregate of the others) and, for scalar values,
    ``min``/``max`` of the left-out aggregates and ``max_shift``, the largest |without - all|: how
    much one checkpoint moves the average. Needs at least two checkpoints.
    """
    agg = aggregate or (lambda a: np.mean(a, axis=0))
    names = list(values)
    if len(names) < 2:
        raise ValueError("leave-one-out needs at least two checkpoints")
    stack = np.stack([np.asarray(values[k], dtype=np.float64) for k in names])
    keep = ~np.eye(len(names), dtype=bool)
    full = agg(stack)
    without = {k: agg(stack[keep[i]]) for i, k in enumerate(names)}
    if np.ndim(full) != 0:
        return LeaveOneOut(len(names), full, without)
    w = np.asarray([float(v) for v in without.values()])
    return LeaveOneOut(
        len(names), float(full), {k: float(v) for k, v in without.items()}, min=float(w.min()), max=float(w.max()),
        max_shift=float(np.max(np.abs(w - float(full)))),
    )
