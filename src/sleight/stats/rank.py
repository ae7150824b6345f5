"""Rank correlation: Spearman's rho, once for every caller (the scan's per-document grades, App. G;
the tamper paper's size statistic).

Average ranks for ties (:func:`~sleight.stats.metrics.average_ranks`, as ``scipy.stats.spearmanr``);
a side with no spread has no rank order, so rho is NaN there -- undefined, never 0.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sleight.stats.metrics import average_ranks


def spearman_rows(x: NDArray[np.float64], y: NDArray[np.float64]) -> float | NDArray[np.float64]:
    """Spearman's rho along the last axis (average ranks for ties; NaN when either side is constant).

    Batched: arrays of shape ``(b, n)`` give ``b`` values, so it serves the bootstrap directly."""
    rx, ry = average_ranks(x), average_ranks(y)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    num = (rx * ry).sum(axis=-1)
    den = np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out
