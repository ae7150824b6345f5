"""The jury's verdict from its votes, and how well two sets of labels agree (pure).

A verdict needs two agreeing non-abstaining votes that outnumber every other value; a jury of one
decides with its single vote (and is reported as a jury of one). Agreement is accuracy and Cohen's
κ over the cases both sides labelled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sleight.stats import cohen_kappa


def majority(votes: Sequence[Hashable | None], jury_size: int) -> Any | None:
    """The value the jury agrees on, ``None`` when there is no majority (``None`` votes abstain)."""
    quorum = min(2, max(jury_size, 1))
    counts = Counter(v for v in votes if v is not None)
    if not counts:
        return None
    ranked = counts.most_common()
    top, n = ranked[0]
    runner_up = ranked[1][1] if len(ranked) > 1 else 0
    return top if n >= quorum and n > runner_up else None


@dataclass(frozen=True)
class Agreement:
    n: int  # cases both sides labelled
    accuracy: float  # share of those cases where they agree (NaN when n == 0)
    kappa: float


def agreement(reference: Sequence[Any | None], other: Sequence[Any | None]) -> Agreement:
    """Agreement of ``other`` with ``reference`` over the cases where neither is ``None``."""
    pairs = [(r, o) for r, o in zip(reference, other) if r is not None and o is not None]
    if not pairs:
        return Agreement(0, float("nan"), float("nan"))
    ref, oth = zip(*pairs)
    acc = sum(r == o for r, o in pairs) / len(pairs)
    return Agreement(len(pairs), float(acc), float(cohen_kappa(np.asarray(ref), np.asarray(oth))))
