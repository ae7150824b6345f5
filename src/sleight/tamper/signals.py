"""Internal signals of a trial (SPEC §3.3): per-token surprisal and entropy, and their post-swap shift.

Pure numpy over the stored lists, so every Δ column recomputes from the tables. Definitions
(all in nats; ``W`` = window width, 8):

* surprisal ``s_t = -ln p(x_t | x_<t)`` of each model-chosen token; undefined (null) at injected ones.
* ``entropy_top20``: entropy of the top-20 log-probs renormalised to sum to one; under the study's
  conventions the chosen token joins them when it is not among them (vLLM returns it beside the
  top-k, :func:`entropy_returned`); ``entropy_full``: the exact entropy of the whole distribution.
* A *swap* is one substitution (study conventions; two adjacent substitutions are two swaps) or one
  maximal run of injected tokens (sleight conventions); its step is its first index.
* Study-compatible ``delta_*``: for each swap, the window is the next ``W`` model-chosen tokens after
  it (injected tokens skipped, cut at the reply's end; a window may run past the next swap, so
  windows can overlap). Δ = mean of all window values pooled (a token in two windows counts
  twice) − mean over the whole clean reply.
* Position-matched ``delta_*_matched``: the same windows but each stops where the next swap starts
  (no overlap); the baseline pools the clean reply's own windows: for each trigger of the clean run,
  the next ``W`` tokens after the trigger token(s), stopping at the clean run's next trigger.

A Δ is null when it has no window token (no swap, or swaps only at the very end) or no baseline.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

WINDOW = 8


def entropy_top(top_logprobs: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each row of top-k log-probs after renormalising them to a distribution."""
    lp = np.asarray(top_logprobs, dtype=np.float64)
    if lp.size == 0:
        return np.zeros(lp.shape[0], dtype=np.float64)
    lp = lp - np.logaddexp.reduce(lp, axis=1, keepdims=True)
    return -(np.exp(lp) * lp).sum(axis=1)


def entropy_returned(top_ids: np.ndarray, top_logprobs: np.ndarray, token_ids: Sequence[int], logprobs: np.ndarray) -> np.ndarray:
    """The study's top-k entropy: over the candidates vLLM returns at a step, the top-k plus the
    chosen token when it is not among them, renormalised (Sleight-of-Word ``tokens.py``
    ``entropy_nats``, l.107-122; vLLM's ``logprobs=k`` dict holds the sampled token too)."""
    lp = np.asarray(top_logprobs, dtype=np.float64)
    if lp.size == 0:
        return np.zeros(lp.shape[0], dtype=np.float64)
    ids = np.asarray(top_ids)
    chosen = np.asarray(token_ids, dtype=np.int64)[:, None]
    outside = ~(ids == chosen).any(axis=1)
    extra = np.where(outside, np.asarray(logprobs, dtype=np.float64), -np.inf)[:, None]
    both = np.concatenate([lp, extra], axis=1)
    both = both - np.logaddexp.reduce(both, axis=1, keepdims=True)
    p = np.exp(both)
    return -np.where(p > 0, p * np.where(np.isfinite(both), both, 0.0), 0.0).sum(axis=1)


def mask_injected(values: np.ndarray, injected: np.ndarray) -> np.ndarray:
    """``values`` as float64 with NaN (stored as null) at injected steps."""
    out = np.asarray(values, dtype=np.float64).copy()
    out[np.asarray(injected, dtype=bool)] = np.nan
    return out


def swap_runs(injected: np.ndarray) -> list[tuple[int, int]]:
    """``(start, end)`` of each maximal run of injected tokens: the swaps of a reply."""
    inj = np.asarray(injected, dtype=bool)
    edges = np.diff(np.concatenate([[0], inj.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def study_windows(injected: np.ndarray, swap_steps: Sequence[int], width: int = WINDOW) -> list[np.ndarray]:
    """Per swap, the indices of the next ``width`` model-chosen tokens after it (may overlap)."""
    chosen = np.flatnonzero(~np.asarray(injected, dtype=bool))
    return [chosen[chosen > step][:width] for step in swap_steps]


def matched_windows(injected: np.ndarray, swap_steps: Sequence[int], width: int = WINDOW) -> list[np.ndarray]:
    """Per swap, the next ``width`` model-chosen tokens after it, stopping at the next swap."""
    inj = np.asarray(injected, dtype=bool)
    chosen = np.flatnonzero(~inj)
    ends = list(swap_steps[1:]) + [len(inj)]
    return [chosen[(chosen > step) & (chosen < end)][:width] for step, end in zip(swap_steps, ends)]


def clean_windows(n: int, trigger_starts: Sequence[int], trigger_ends: Sequence[int], width: int = WINDOW) -> list[np.ndarray]:
    """Per trigger of the clean reply, the next ``width`` tokens after it, stopping at the next trigger."""
    nexts = list(trigger_starts[1:]) + [n]
    return [np.arange(end, min(end + width, nxt)) for end, nxt in zip(trigger_ends, nexts)]


def pooled_mean(values: np.ndarray, windows: Sequence[np.ndarray]) -> float | None:
    """Mean of the values in all windows pooled; ``None`` when the windows are empty."""
    idx = np.concatenate([np.asarray(w, dtype=np.int64) for w in windows]) if windows else np.zeros(0, dtype=np.int64)
    if idx.size == 0:
        return None
    mean = float(np.mean(np.asarray(values, dtype=np.float64)[idx]))
    return None if np.isnan(mean) else mean  # a signal the engine did not give (vLLM's full entropy) is null


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def trial_deltas(
    trial: dict[str, np.ndarray],
    injected: np.ndarray,
    swap_steps: Sequence[int],
    clean: dict[str, np.ndarray],
    clean_trigger_starts: Sequence[int],
    clean_trigger_ends: Sequence[int],
    width: int = WINDOW,
) -> dict[str, float | None]:
    """Every Δ column of one trial.

    ``trial`` and ``clean`` map a signal name (``surprisal``, ``entropy_top20``, ``entropy_full``)
    to its per-token values; ``injected``/``swap_steps`` describe the trial's reply.
    """
    names = {"surprisal": "delta_surprisal", "entropy_top20": "delta_entropy", "entropy_full": "delta_entropy_full"}
    out: dict[str, float | None] = {}
    sw = study_windows(injected, swap_steps, width)
    mw = matched_windows(injected, swap_steps, width)
    n_clean = len(next(iter(clean.values()))) if clean else 0
    cw = clean_windows(n_clean, clean_trigger_starts, clean_trigger_ends, width)
    for sig, col in names.items():
        cvals = np.asarray(clean[sig], dtype=np.float64)
        whole = float(np.mean(cvals)) if cvals.size else None
        out[col] = _minus(pooled_mean(trial[sig], sw), whole) if swap_steps else None
        out[col + "_matched"] = _minus(pooled_mean(trial[sig], mw), pooled_mean(cvals, cw)) if swap_steps else None
    return out
