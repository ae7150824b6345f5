"""Grades against human ratings: summary-level Spearman rho within each document, averaged.

G-Eval reports agreement with human ratings summary by summary inside each source document, then
averages over documents. A document whose scores (or ratings) are all equal has no rank order:
its rho is *undefined* and left out of the average and counted, never entered as 0 (a readout that
collapses to one grade would otherwise look merely uncorrelated). Two readouts of the same
summaries are compared with a paired document bootstrap: documents are resampled, both readouts'
per-document rhos on the same replicates, so the interval is that of their difference.

The results are frozen records (:class:`DocumentRho`, :class:`PairedDocumentDifference`); each one's
``as_record`` is the JSON object the scan's rows have always held (its keys in their order) and
``from_record`` reads one back. Pure numpy (rho from :func:`sleight.stats.rank.spearman_rows`); no model.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sleight.stats import bootstrap_ci, mean, paired_bootstrap
from sleight.stats.rank import spearman_rows


@dataclass(frozen=True)
class DocumentRho:
    """The within-document rho averaged over documents, with how many documents define it: the
    agreement figure of App. G, read by field in the scan's rows and the reproduced tables."""

    rho: float | None
    n_documents: int
    n_defined: int
    n_undefined: int
    per_document: Mapping[str, float | None]

    def as_record(self) -> dict[str, object]:
        return {"rho": self.rho, "n_documents": self.n_documents, "n_defined": self.n_defined, "n_undefined": self.n_undefined, "per_document": dict(self.per_document)}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> DocumentRho:
        per = {str(k): v for k, v in (d.get("per_document") or {}).items()}
        return cls(d["rho"], int(d["n_documents"]), int(d["n_defined"]), int(d["n_undefined"]), per)


@dataclass(frozen=True)
class PairedDocumentDifference:
    """Averaged within-document rho of readout ``a`` minus that of ``b`` over the documents where
    both are defined, with its paired document-bootstrap interval (the numbers None where none is)."""

    n_documents: int
    n_paired: int
    B: int
    level: float
    seed: int
    rho_a: float | None = None
    rho_b: float | None = None
    diff: float | None = None
    low: float | None = None
    high: float | None = None

    def as_record(self) -> dict[str, object]:
        return {
            "n_documents": self.n_documents, "n_paired": self.n_paired, "B": self.B, "level": self.level, "seed": self.seed,
            "rho_a": self.rho_a, "rho_b": self.rho_b, "diff": self.diff, "low": self.low, "high": self.high,
        }

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> PairedDocumentDifference:
        return cls(
            int(d["n_documents"]), int(d["n_paired"]), int(d["B"]), d["level"], int(d["seed"]),
            d["rho_a"], d["rho_b"], d["diff"], d["low"], d["high"],
        )


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


def within_document_spearman(scores: Sequence[float | None], human: Sequence[float], docs: Sequence[Hashable]) -> DocumentRho:
    """The average over documents of the within-document rho (None when no document has one),
    with the count of documents where rho is undefined."""
    per = per_document_rho(scores, human, docs)
    defined = [v for v in per.values() if v is not None]
    return DocumentRho(
        rho=float(np.mean(defined)) if defined else None,
        n_documents=len(per),
        n_defined=len(defined),
        n_undefined=len(per) - len(defined),
        per_document={str(k): v for k, v in per.items()},
    )


def paired_document_difference(
    scores_a: Sequence[float | None],
    scores_b: Sequence[float | None],
    human: Sequence[float],
    docs: Sequence[Hashable],
    *,
    B: int = 20000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedDocumentDifference:
    """Averaged within-document rho of ``a`` minus that of ``b``, with a paired document bootstrap.

    Only documents where both rhos are defined enter the difference (their count is reported);
    each replicate draws documents with replacement and averages both readouts over the same draw.
    """
    pa, pb = per_document_rho(scores_a, human, docs), per_document_rho(scores_b, human, docs)
    both = [d for d in pa if pa[d] is not None and pb[d] is not None]
    counts = PairedDocumentDifference(n_documents=len(pa), n_paired=len(both), B=B, level=level, seed=seed)
    if not both:
        return counts
    ra = np.asarray([pa[d] for d in both], dtype=np.float64)
    rb = np.asarray([pb[d] for d in both], dtype=np.float64)
    pbs = paired_bootstrap(_mean, (ra,), (rb,), B=B, seed=seed, level=level)
    return replace(counts, rho_a=pbs.estimate_a, rho_b=pbs.estimate_b, diff=pbs.diff, low=pbs.ci_diff.low, high=pbs.ci_diff.high)


def rho_interval(
    scores: Sequence[float | None], human: Sequence[float], docs: Sequence[Hashable], *, B: int = 20000, seed: int = 0, level: float = 0.95
) -> tuple[DocumentRho, float | None, float | None]:
    """The averaged rho with its document-bootstrap interval ``(rho, low, high)``; the bounds None
    where no document defines rho."""
    w = within_document_spearman(scores, human, docs)
    vals = np.asarray([v for v in w.per_document.values() if v is not None], dtype=np.float64)
    if not vals.size:
        return w, None, None
    ci = bootstrap_ci(_mean, vals, B=B, seed=seed, level=level)
    return w, ci.low, ci.high
