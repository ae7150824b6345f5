"""Single-answer uncertainty estimators from the answer's own tokens, beside P(True).

lm-polygraph's default estimator set (``examples/configs/estimators/default_estimators.yaml`` at
v0.7.0) opens with three that need nothing but the greedy answer's token records:

* ``MaximumSequenceProbability`` -- ``-Σ log p(y_t | y_<t, x)`` (``estimators/max_probability.py``);
* ``Perplexity`` -- ``-mean log p(y_t | y_<t, x)`` (``estimators/perplexity.py``);
* ``MeanTokenEntropy`` -- the mean over the answer's positions of the entropy of the full next-token
  distribution (``estimators/token_entropy.py``, fed by ``EntropyCalculator``).

All three are uncertainties: higher means less sure, so ``-estimate`` is the confidence ranked
against correctness. As in lm-polygraph's ``GreedyProbsCalculator``, an answer that ended by the
model's choice includes its end-of-sequence token (log-probability and entropy at that position);
an answer cut by the budget has none. The records come from the model's own greedy decode (plain
log-softmax; lm-polygraph additionally masks EOS for the first two steps, ``min_new_tokens=2``).

Where lm-polygraph is installed (``pip install 'sleight[polygraph]'``), its own estimator classes are
applied to the same records and theirs are the values reported (:func:`estimate`); without it the
three are computed here. Other members of its default set need more than the answer's tokens
(sampling, an NLI model, hidden states, a training set) and are not computed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sleight.backends.base import Generation, LanguageModel


@dataclass(frozen=True)
class AnswerTokens:
    """The records of one greedy answer: per token its log-probability and the entropy there."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    entropies: tuple[float, ...]
    ended: bool  # the model chose to stop (its end-of-sequence token is the last record)


def maximum_sequence_probability(a: AnswerTokens) -> float:
    return float(-np.sum(np.asarray(a.logprobs, dtype=np.float64)))


def perplexity(a: AnswerTokens) -> float:
    return float(-np.mean(np.asarray(a.logprobs, dtype=np.float64))) if a.logprobs else float("nan")


def mean_token_entropy(a: AnswerTokens) -> float:
    return float(np.mean(np.asarray(a.entropies, dtype=np.float64))) if a.entropies else float("nan")


TOKEN_ESTIMATORS: dict[str, Callable[[AnswerTokens], float]] = {
    "MaximumSequenceProbability": maximum_sequence_probability,
    "Perplexity": perplexity,
    "MeanTokenEntropy": mean_token_entropy,
}


def answer_tokens(model: LanguageModel, prompts: Sequence[Sequence[int]], gens: Sequence[Generation]) -> list[AnswerTokens]:
    """Token records of greedy answers; for an answer that stopped, one more read at its end gives
    the end-of-sequence token's log-probability and the entropy there (one batched pass)."""
    eos = min(model.eos_ids)
    stopped = [k for k, g in enumerate(gens) if g.finish_reason == "stop"]
    ends = model.read_next([list(prompts[k]) + list(gens[k].token_ids) for k in stopped], [[eos]] * len(stopped), top_k=1) if stopped else []
    at_end = {k: nt for k, nt in zip(stopped, ends)}
    out = []
    for k, g in enumerate(gens):
        ids, lps, ents = list(g.token_ids), [float(v) for v in g.logprobs], [float(v) for v in g.entropy]
        if k in at_end:
            ids.append(eos)
            lps.append(float(at_end[k].logprobs[0]))
            ents.append(float(at_end[k].entropy))
        out.append(AnswerTokens(tuple(ids), tuple(lps), tuple(ents), k in at_end))
    return out


def polygraph_estimators() -> dict[str, Any] | None:
    """lm-polygraph's own estimator objects for the three, or None when it is not installed."""
    try:
        from lm_polygraph.estimators import MaximumSequenceProbability, MeanTokenEntropy, Perplexity  # type: ignore[import-not-found]
    except ImportError:
        return None
    return {str(e): e for e in (MaximumSequenceProbability(), Perplexity(), MeanTokenEntropy())}


def polygraph_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("lm-polygraph")
    except Exception:  # not installed
        return None


def estimate(answers: Sequence[AnswerTokens], *, use_polygraph: bool = True) -> tuple[dict[str, np.ndarray], str]:
    """Each estimator's value per answer, and who computed them (``lm-polygraph X`` or ``sleight``)."""
    stats = {
        "greedy_log_likelihoods": [np.asarray(a.logprobs, dtype=np.float64) for a in answers],
        "entropy": [np.asarray(a.entropies, dtype=np.float64) for a in answers],
    }
    lib = polygraph_estimators() if use_polygraph else None
    if lib is not None:
        return {name: np.asarray(est(stats), dtype=np.float64) for name, est in lib.items()}, f"lm-polygraph {polygraph_version()}"
    return {name: np.asarray([fn(a) for a in answers], dtype=np.float64) for name, fn in TOKEN_ESTIMATORS.items()}, "sleight"


def comparison(
    labels: Sequence[float],
    clusters: Sequence[Any],
    uncertainties: Mapping[str, Any],
    ptrue: Mapping[str, Sequence[float | None]],
    *,
    B: int = 20000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """AUROC and PRR of every estimator (confidence = -uncertainty) and every P(True) readout, and
    the paired difference of each P(True) readout against each estimator (same replicates).

    Each pair is scored on the answers where both are defined.
    """
    from sleight.stats.downstream import clean, cluster_codes, metric_interval, paired_difference

    y = np.asarray(labels, dtype=np.float64)
    cl = cluster_codes(list(clusters))
    conf = {k: -np.asarray(v, dtype=np.float64) for k, v in uncertainties.items()}
    pt = {k: np.asarray([np.nan if v is None else v for v in vals], dtype=np.float64) for k, vals in ptrue.items()}

    def metrics(s: np.ndarray) -> dict[str, Any]:
        ok = np.isfinite(s)
        return {m: metric_interval(m, s[ok], y[ok], clusters=cl[ok], B=B, seed=seed, level=level) if ok.any() else None for m in ("auroc", "prr")}

    out: dict[str, Any] = {"n": int(y.size), "n_correct": int(y.sum()), "estimators": {k: metrics(v) for k, v in conf.items()}, "ptrue": {k: metrics(v) for k, v in pt.items()}, "differences": {}}
    for r, s in pt.items():
        for e, c in conf.items():
            ok = np.isfinite(s) & np.isfinite(c)
            out["differences"][f"{r} - {e}"] = {
                m: paired_difference(m, s[ok], c[ok], y[ok], clusters=cl[ok], B=B, seed=seed, level=level, name_a=r, name_b=e) if ok.any() else None
                for m in ("auroc", "prr")
            }
    return clean(out)
