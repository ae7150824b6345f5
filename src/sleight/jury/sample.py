"""A stratified, seeded sample for people to label (pure): the human gold subset of both instruments.

``tamper gold`` stratifies judged trials by the jury's four labels
(:mod:`sleight.tamper.jury.gold`); ``readout labels --sample`` stratifies an audit's continuations by
variant group and the readout jury's class (:mod:`sleight.readout.audit.labels`). Both allocate with
:func:`allocate` and draw with :func:`draw`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd


def allocate(sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """How many of ``n`` to draw from each stratum: proportional to its size, largest remainders
    first, at least one from every stratum while ``n`` allows it, never more than a stratum holds."""
    total = sum(sizes.values())
    n = min(n, total)
    if n <= 0:
        return {k: 0 for k in sizes}
    keys = sorted(sizes)
    take = {k: 0 for k in keys}
    if n >= len([k for k in keys if sizes[k]]):
        for k in keys:
            take[k] = 1 if sizes[k] else 0
    left = n - sum(take.values())
    while left > 0:
        quota = {k: n * sizes[k] / total - take[k] for k in keys if take[k] < sizes[k]}
        k = max(sorted(quota), key=lambda s: quota[s])
        take[k] += 1
        left -= 1
    return take


def draw(df: pd.DataFrame, n: int, seed: int, column: str = "stratum") -> pd.DataFrame:
    """``n`` rows of ``df`` stratified by ``column`` (seeded: the same inputs give the same rows, in
    ``df``'s order)."""
    df = df.reset_index(drop=True)
    sizes = {str(k): int(v) for k, v in df[column].value_counts().items()}
    take = allocate(sizes, n)
    rng = np.random.default_rng(seed)
    picked: list[int] = []
    for name in sorted(take):
        members = df.index[df[column] == name].to_numpy()
        if take[name]:
            picked += sorted(int(i) for i in rng.choice(members, size=take[name], replace=False))
    return df.loc[sorted(picked)].reset_index(drop=True)
