"""Forward passes in bounded slices.

The engines compute logits at every position of a batch before keeping the last one, so a batch of
``B`` prompts of ``L`` tokens holds ``B*L*vocab`` floats (~0.8 GB for 16 x 250 x 49k). Slicing the
rows here keeps memory flat whatever ``--batch-size`` says; the readings do not depend on it.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

DEFAULT_ROWS_PER_PASS = 16


def sliced_rows(
    fn: Callable[[Sequence[Sequence[int]]], np.ndarray],
    seqs: Sequence[Sequence[int]],
    reduce: Callable[[int, np.ndarray], None],
    rows_per_pass: int = DEFAULT_ROWS_PER_PASS,
) -> None:
    """Run ``fn`` (``next_token_logprobs`` or ``next_token_logits``) over ``seqs`` in slices, handing
    each row to ``reduce(index, row)`` so the full (n, vocab) matrix never has to exist at once."""
    step = max(1, int(rows_per_pass))
    for start in range(0, len(seqs), step):
        block = fn(list(seqs[start : start + step]))
        for k in range(block.shape[0]):
            reduce(start + k, block[k])


def gather(
    fn: Callable[[Sequence[Sequence[int]]], np.ndarray],
    seqs: Sequence[Sequence[int]],
    ids: Sequence[Sequence[int]],
    rows_per_pass: int = DEFAULT_ROWS_PER_PASS,
) -> list[np.ndarray]:
    """Values of ``fn``'s last-position row at the given token ids, one array per sequence."""
    out: list[np.ndarray] = [np.empty(0)] * len(seqs)

    def keep(i: int, row: np.ndarray) -> None:
        out[i] = np.asarray(row[list(ids[i])], dtype=np.float64)

    sliced_rows(fn, seqs, keep, rows_per_pass)
    return out
