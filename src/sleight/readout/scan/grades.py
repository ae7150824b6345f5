"""Grades against human ratings: summary-level Spearman rho within each document, averaged.

G-Eval reports agreement with human ratings summary by summary inside each source document, then
averages over documents. A document whose scores (or ratings) are all equal has no rank order:
its rho is *undefined* and left out of the average and counted, never entered as 0 (a readout that
collapses to one grade would otherwise look merely uncorrelated). Two readouts of the same
summaries are compared with a paired document bootstrap: documents are resampled, both readouts'
per-document rhos on the same replicates, so the interval is that of their difference.

Pure numpy (rho from :func:`sleight.stats.rank.spearman_rows`); no model.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from sleight.stats import bootstrap_ci, mean, paired_bootstrap
from sleight.stats.rank import spearman_rows


def _mean(*arrays: Any, weights: np.ndarray | None = None) -> Any:
    """The batched mean (:func:`sleight.stats.mean`) in the bootstrap's statistic form."""
    return mean(arrays[0], weights)


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho (:func:`sleight.stats.rank.spearman_rows`); None when either vector is constant
    or shorter than 2 (undefined, not 0)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"x and y must be 1-D of one length, got {a.shape} and {b.shape}")
    if a.size < 2:
        return None
    rho = float(spearman_rows(a, b))
    return None if math.isnan(rho) else rho


def per_document_rho(scores: Sequence[float | None], human: Sequence[float], docs: Sequence[Hashable]) -> dict[Hashable, float | None]:
    """rho of each document's summaries (pairs with a missing score dropped), in first-seen order."""
    if not (len(scores) == len(human) == len(docs)):
        raise ValueError("scores, human and docs must have one entry per summary")
    groups: dict[Hashable, list[tuple[float, float]]] = {}
    for s, h, d in zip(scores, human, docs):
        pairs = groups.setdefault(d, [])
        if s is not None and h is not None and math.isfinite(float(s)) and math.isfinite(float(h)):
            pairs.append((float(s), float(h)))
    return {d: spearman([p[0] for p in ps], [p[1] for p in ps]) for d, ps in groups.items()}


def within_document_spearman(scores: Sequence[float | None], human: Sequence[float], docs: Sequence[Hashable]) -> dict[str, Any]:
    """The average over documents of the within-document rho (None when no document has one),
    with the count of documents where rho is undefined."""
    per = per_document_rho(scores, human, docs)
    defined = [v for v in per.values() if v is not None]
    return {
        "rho": float(np.mean(defined)) if defined else None,
        "n_documents": len(per),
        "n_defined": len(defined),
        "n_undefined": len(per) - len(defined),
        "per_document": {str(k): v for k, v in per.items()},
    }


def paired_document_difference(
    scores_a: Sequence[float | None],
    scores_b: Sequence[float | None],
    human: Sequence[float],
    docs: Sequence[Hashable],
    *,
    B: int = 20000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """Averaged within-document rho of ``a`` minus that of ``b``, with a paired document bootstrap.

    Only documents where both rhos are defined enter the difference (their count is reported);
    each replicate draws documents with replacement and averages both readouts over the same draw.
    """
    pa, pb = per_document_rho(scores_a, human, docs), per_document_rho(scores_b, human, docs)
    both = [d for d in pa if pa[d] is not None and pb[d] is not None]
    out: dict[str, Any] = {"n_documents": len(pa), "n_paired": len(both), "B": B, "level": level, "seed": seed}
    if not both:
        return {**out, "rho_a": None, "rho_b": None, "diff": None, "low": None, "high": None}
    ra = np.asarray([pa[d] for d in both], dtype=np.float64)
    rb = np.asarray([pb[d] for d in both], dtype=np.float64)
    pbs = paired_bootstrap(_mean, (ra,), (rb,), B=B, seed=seed, level=level)
    return {
        **out,
        "rho_a": pbs.estimate_a,
        "rho_b": pbs.estimate_b,
        "diff": pbs.diff,
        "low": pbs.ci_diff.low,
        "high": pbs.ci_diff.high,
    }


def rho_interval(scores: Sequence[float | None], human: Sequence[float], docs: Sequence[Hashable], *, B: int = 20000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """The averaged rho with its document-bootstrap interval (None where no document defines it)."""
    w = within_document_spearman(scores, human, docs)
    vals = np.asarray([v for v in w["per_document"].values() if v is not None], dtype=np.float64)
    if not vals.size:
        return {**w, "low": None, "high": None}
    ci = bootstrap_ci(_mean, vals, B=B, seed=seed, level=level)
    return {**w, "low": ci.low, "high": ci.high}
