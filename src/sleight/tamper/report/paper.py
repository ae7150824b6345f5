"""The paper's tables and claims, computed as its code computes them, each with a cluster bootstrap
interval (resampling questions).

Sleight of Word (arXiv 2608.29921) prints Table 1 (§4), Table 2 (App. B: entity vs neutral words)
and the untouched rates (App. D); §5 rests on a pooled switch-aware rate, the thinking pairs
(Magistral vs Mistral-Small, DeepSeek-R1-Distill-32B vs Qwen2.5-32B) and a claim about size ("no
clear correlation ... between the model's number of parameters and its ability to notice"). The
numbers follow the study's table script (fractalego/Sleight-of-Word ``scripts/update_paper_tables.py``
at 08d2bae): rates over judged trials (lines 55-64), Flag. (M.E.) over the entity trials (65-69),
Ign. when no label is true (63-64), Δ the mean over trials that have one (51-54), untouched over all
trials (49-50), Table 2's pooled row from summed counts and its Δ the difference of the rounded
percentages (105-119), rows sorted by flagged to two decimals (83).

Beyond the paper: every rate and Δ gets a percentile cluster bootstrap interval that resamples
questions (the 100 questions are the independent units; the 101 substitutes of a question share its
reply). Each replicate draws questions with replacement, so a rate is computed from per-question
sums: ``ratio(k, n)`` over question rows with :func:`sleight.stats.bootstrap_ci` resampling rows is
exactly the trial-level cluster bootstrap (the same draws for the same seed). The size statistic is
Spearman's ρ of a model's size against each rate over models, its interval a bootstrap over models
(the claim is about models), reported twice: over total parameters (``params_b``) and over active
ones (``active_params_b``, read per token; a dense model's is its total). The paper does not say which
it means; its "roughly 2B to 72B" (§4) counts Gemma 4 E2B by its effective (active) size.
Pure: arrays in, dataclasses out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sleight.stats import BatchedStat, bootstrap_ci, gathered
from sleight.stats.rank import spearman_rows as _spearman_rows

B_DEFAULT = 20_000
LEVEL = 0.95


@dataclass(frozen=True)
class Boot:
    """How every interval is drawn: replicates, seed, level."""

    B: int = B_DEFAULT
    seed: int = 0
    level: float = LEVEL
LABELS: tuple[str, ...] = ("flagged", "corrected", "derailed", "switch_aware")

# Table 1's columns as the paper prints them, and what each reads.
FLAG, FLAG_ME, IGN, DERAIL, CORR, AWARE = "Flag.", "Flag. (M.E.)", "Ign.", "Derail.", "Corr.", "Switch aware"
DSURP, DENT = "Δsurp. (nats)", "Δent. (nats)"
RATES: tuple[str, ...] = (FLAG, FLAG_ME, IGN, DERAIL, CORR, AWARE)
DELTAS: tuple[str, ...] = (DSURP, DENT)
TABLE1: tuple[str, ...] = (*RATES, *DELTAS)
# Table 2's conditions and labels.
T2_LABELS: tuple[str, ...] = ("flagged", "derailed")
# The size statistic's two sizes: every parameter, or those read per token (a mixture of experts).
TOTAL, ACTIVE = "total", "active"
SIZES: tuple[str, ...] = (TOTAL, ACTIVE)


@dataclass(frozen=True)
class Estimate:
    """A rate (a share, 0-1) or a Δ (nats) with its interval; ``k``/``n``: numerator (trials, or a sum
    of Δ) and denominator (trials). NaN where nothing was measured."""

    value: float
    low: float
    high: float
    k: float = 0.0
    n: int = 0

    @property
    def missing(self) -> bool:
        return math.isnan(self.value)


MISSING = Estimate(math.nan, math.nan, math.nan)


@dataclass(frozen=True)
class ModelTrials:
    """What the tables read of one model's run (pure input; :func:`sleight.tamper.report.paper_sections.model_trials`
    builds it from a run). Judged arrays are per judged trial (≥1 swap), the others per trial."""

    key: str  # the run's name (a sweep subject's name)
    display: str
    thinking_capable: bool
    params_b: float | None
    question: NDArray[Any]  # judged trials' question ids
    entity: NDArray[np.bool_]
    labels: Mapping[str, NDArray[np.bool_]] | None  # the jury's true verdicts per label, and "ignored"; None: not judged
    all_question: NDArray[Any]  # every trial's question id
    untouched: NDArray[np.bool_]
    delta_surprisal: NDArray[np.float64]  # every trial, NaN where the trial has none
    delta_entropy: NDArray[np.float64]
    active_params_b: float | None = None  # read per token (MoE, Gemma's E-models); None: dense, the total


def model_size(m: ModelTrials, size: str) -> float | None:
    """``m``'s size in billions of parameters: ``TOTAL`` every one, ``ACTIVE`` those read per token
    (a dense model's active size is its total); ``None`` where the config gives none."""
    if size == TOTAL:
        return m.params_b
    if size == ACTIVE:
        return m.params_b if m.active_params_b is None else m.active_params_b
    raise ValueError(f"size {size!r}: one of {SIZES}")


@dataclass(frozen=True)
class ModelRow:
    """One model's row of Table 1, Table 2 and the untouched table."""

    model: ModelTrials
    table1: Mapping[str, Estimate]  # by Table 1 column
    untouched: Estimate
    entity: Mapping[str, Estimate]  # Table 2, by label: entity trials
    neutral: Mapping[str, Estimate]  # ... the 100 neutral words
    entity_minus_neutral: Mapping[str, Estimate]


@dataclass(frozen=True)
class SizeStat:
    """Spearman's ρ of parameter count (``size``: total or active) against one Table 1 column, over
    the models that have both."""

    column: str
    rho: float
    low: float
    high: float
    n_models: int
    size: str = TOTAL


@dataclass(frozen=True)
class PairStat:
    """A matched pair: a thinking model and its non-thinking sibling, flagged rates and their difference."""

    thinking: ModelTrials
    sibling: ModelTrials
    thinking_rate: Estimate
    sibling_rate: Estimate
    diff: Estimate  # thinking - sibling


@dataclass(frozen=True)
class PaperTables:
    rows: tuple[ModelRow, ...]  # Table 1's order: flagged, descending
    pooled_entity: Mapping[str, Estimate]
    pooled_neutral: Mapping[str, Estimate]
    pooled_diff: Mapping[str, Estimate]
    pooled_switch_aware: Estimate
    size: tuple[SizeStat, ...]  # every Table 1 column over total sizes, then over active sizes
    pairs: tuple[PairStat, ...]
    pairs_missing: tuple[tuple[str, str], ...]  # pairs the runs do not cover
    B: int
    level: float


# --------------------------------------------------------------------------- batched statistics


def ratio(k: ArrayLike, n: ArrayLike, weights: ArrayLike | None = None) -> float | NDArray[np.float64]:
    """Σk / Σn over rows (questions), in the bootstrap's batched form (NaN where Σn is 0)."""
    kk, nn = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    if weights is None:
        den = nn.sum()
        return float(kk.sum() / den) if den else math.nan
    w = np.asarray(weights, dtype=np.float64)
    num, den = w @ kk, w @ nn
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def ratio_diff(ka: ArrayLike, na: ArrayLike, kb: ArrayLike, nb: ArrayLike, weights: ArrayLike | None = None) -> float | NDArray[np.float64]:
    """``ratio(ka, na) - ratio(kb, nb)`` on the same rows (the same questions drawn for both sides)."""
    a, b = ratio(ka, na, weights), ratio(kb, nb, weights)
    return float(a) - float(b) if weights is None else np.asarray(a) - np.asarray(b)


spearman = gathered(_spearman_rows)


# --------------------------------------------------------------------------- estimates


def _per_question(units: NDArray[np.str_], q: NDArray[np.str_], x: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per question (``units``, sorted): the sum of ``x`` and the number of items."""
    codes = np.searchsorted(units, q)
    sums = np.bincount(codes, weights=x, minlength=len(units)).astype(np.float64)
    return sums, np.bincount(codes, minlength=len(units)).astype(np.float64)


def rate(question: ArrayLike, values: ArrayLike, boot: Boot = Boot()) -> Estimate:
    """The mean of ``values`` (booleans: a rate; Δ: a mean) over items whose value is finite, with a
    percentile interval from resampling questions."""
    q, x = np.asarray(question).astype(str), np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(x)
    q, x = q[keep], x[keep]
    if not len(x):
        return MISSING
    units = np.unique(q)
    k, n = _per_question(units, q, x)
    ci = bootstrap_ci(cast(BatchedStat, ratio), k, n, B=boot.B, seed=boot.seed, level=boot.level)
    return Estimate(ci.estimate, ci.low, ci.high, float(x.sum()), len(x))


def rate_diff(qa: ArrayLike, xa: ArrayLike, qb: ArrayLike, xb: ArrayLike, boot: Boot = Boot()) -> Estimate:
    """``rate(a) - rate(b)``, both sides resampled by the same questions (a paired cluster bootstrap)."""
    qa_, xa_ = np.asarray(qa).astype(str), np.asarray(xa, dtype=np.float64)
    qb_, xb_ = np.asarray(qb).astype(str), np.asarray(xb, dtype=np.float64)
    if not len(xa_) or not len(xb_):
        return MISSING
    units = np.unique(np.concatenate([qa_, qb_]))
    ka, na = _per_question(units, qa_, xa_)
    kb, nb = _per_question(units, qb_, xb_)
    ci = bootstrap_ci(cast(BatchedStat, ratio_diff), ka, na, kb, nb, B=boot.B, seed=boot.seed, level=boot.level)
    return Estimate(ci.estimate, ci.low, ci.high, float(xa_.sum() - xb_.sum()), len(xa_) + len(xb_))


def _label(m: ModelTrials, name: str) -> NDArray[np.float64]:
    assert m.labels is not None
    return np.asarray(m.labels[name], dtype=np.float64)


def model_row(m: ModelTrials, boot: Boot = Boot()) -> ModelRow:
    """Table 1, Table 2 and the untouched rate of one model."""
    t1: dict[str, Estimate] = {}
    ent: dict[str, Estimate] = {}
    neu: dict[str, Estimate] = {}
    diff: dict[str, Estimate] = {}
    if m.labels is not None and len(m.question):
        for col, label in ((FLAG, "flagged"), (IGN, "ignored"), (DERAIL, "derailed"), (CORR, "corrected"), (AWARE, "switch_aware")):
            t1[col] = rate(m.question, _label(m, label), boot)
        t1[FLAG_ME] = rate(m.question[m.entity], _label(m, "flagged")[m.entity], boot)
        for label in T2_LABELS:
            x = _label(m, label)
            ent[label] = rate(m.question[m.entity], x[m.entity], boot)
            neu[label] = rate(m.question[~m.entity], x[~m.entity], boot)
            diff[label] = rate_diff(m.question[m.entity], x[m.entity], m.question[~m.entity], x[~m.entity], boot)
    t1[DSURP] = rate(m.all_question, m.delta_surprisal, boot)
    t1[DENT] = rate(m.all_question, m.delta_entropy, boot)
    return ModelRow(m, t1, rate(m.all_question, m.untouched, boot), ent, neu, diff)


def table1_order(rows: Sequence[ModelRow]) -> list[ModelRow]:
    """Flagged (as a percentage to two decimals), descending; then the run name (the study's order)."""

    def key(r: ModelRow) -> tuple[float, str]:
        e = r.table1.get(FLAG, MISSING)
        return (math.inf if e.missing else -round(100 * e.k / e.n, 2), r.model.key)

    return sorted(rows, key=key)


def paper_tables(models: Sequence[ModelTrials], pairs: Sequence[tuple[str, str]] = (), boot: Boot = Boot()) -> PaperTables:
    """Every table and claim over ``models``; ``pairs``: (thinking model, sibling) by run name."""
    rows = table1_order([model_row(m, boot) for m in models])
    judged = [m for m in models if m.labels is not None and len(m.question)]

    def pooled(label: str, mask: str) -> tuple[NDArray[np.str_], NDArray[np.float64]]:
        qs, xs = [], []
        for m in judged:
            sel = m.entity if mask == "entity" else (~m.entity if mask == "neutral" else np.ones(len(m.question), bool))
            qs.append(m.question[sel])
            xs.append(_label(m, label)[sel])
        return (np.concatenate(qs), np.concatenate(xs)) if qs else (np.zeros(0, str), np.zeros(0))

    p_ent, p_neu, p_diff = {}, {}, {}
    for label in T2_LABELS:
        qe, xe = pooled(label, "entity")
        qn, xn = pooled(label, "neutral")
        p_ent[label], p_neu[label] = rate(qe, xe, boot), rate(qn, xn, boot)
        p_diff[label] = rate_diff(qe, xe, qn, xn, boot)
    qa, xa = pooled("switch_aware", "all")
    aware = rate(qa, xa, boot)

    size = tuple(size_stat(rows, col, boot, kind) for kind in SIZES for col in TABLE1)

    by_key = {m.key: m for m in models}
    found, missing = [], []
    for a, b in pairs:
        ma, mb = by_key.get(a), by_key.get(b)
        if ma is None or mb is None or ma.labels is None or mb.labels is None:
            missing.append((a, b))
            continue
        fa, fb = _label(ma, "flagged"), _label(mb, "flagged")
        found.append(PairStat(ma, mb, rate(ma.question, fa, boot), rate(mb.question, fb, boot), rate_diff(ma.question, fa, mb.question, fb, boot)))
    return PaperTables(tuple(rows), p_ent, p_neu, p_diff, aware, size, tuple(found), tuple(missing), boot.B, boot.level)


def size_stat(rows: Sequence[ModelRow], column: str, boot: Boot = Boot(), size: str = TOTAL) -> SizeStat:
    """Spearman's ρ of each model's ``size`` (:func:`model_size`) against ``column`` over the models
    that have both (at least three), with a percentile interval from resampling models."""
    pts = [(b, r.table1[column].value) for r in rows if (b := model_size(r.model, size)) is not None and column in r.table1 and not r.table1[column].missing]
    if len(pts) < 3:
        return SizeStat(column, math.nan, math.nan, math.nan, len(pts), size)
    x = np.array([p[0] for p in pts], dtype=np.float64)
    y = np.array([p[1] for p in pts], dtype=np.float64)
    ci = bootstrap_ci(spearman, x, y, B=boot.B, seed=boot.seed, level=boot.level)
    return SizeStat(column, ci.estimate, ci.low, ci.high, len(pts), size)
