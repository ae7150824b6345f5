"""The P(True) experiment: do five readouts of lm-polygraph's P(True) prompt rank answer correctness?

Steps:

1. The model answers each question greedily (:mod:`sleight.readout.ptrue.answers`); correctness is
   the first standalone letter for lettered items, alias matching on word boundaries for free ones.
2. Pairs (question, answer, label) are built in one or both *settings*:

   * ``own`` -- the model's own greedy answer, labelled by its correctness. This is the usual
     lm-polygraph setting (P(True) as an uncertainty score for the model's own generation).
   * ``constructed`` -- each question twice, with its gold answer (label 1) and with the fixture's
     plausible wrong answer (label 0; for lettered items the first non-gold choice). Balanced
     labels by construction, so the ranking is measurable even when a small model gets most
     questions wrong; the two rows of a question form one bootstrap cluster.

3. The readouts of :data:`sleight.readout.ptrue.readouts.READOUTS` score every pair
   (:func:`~sleight.readout.ptrue.readouts.score_pairs`): one reading of each readout's scored position
   gives its value, its option mass over its own options, the unrestricted argmax and its class;
   a greedy decode there gives the continuation. Library reproduces lm-polygraph 0.7.0 (its EOS
   masking included); ``instruct=False`` reads the raw prompt string, as the library does for a
   model that is not an instruct model.

:func:`summarise` (pure) gives AUROC and PRR with cluster-bootstrap intervals per readout, the paired
differences against Library (both readouts on the same replicates), and the position diagnostics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from sleight.backends import LanguageModel
from sleight.errors import UserError
from sleight.readout.audit.measure import MASS_FLOOR
from sleight.readout.ptrue.answers import (
    LETTERS,
    Answer,
    QAItem,
    greedy_answers,
    judge_answer,
)
from sleight.readout.ptrue.readouts import READOUT_LABELS, READOUT_NAMES, READOUTS, score_pairs
from sleight.stats.downstream import (
    clean,
    cluster_codes,
    counts,
    mass_summary,
    metric_interval,
    paired_difference,
)

SETTINGS = ("own", "constructed")
ANSWER_MAX_NEW_TOKENS = 32
CONTINUATION_TOKENS = 16
READOUT_OPTIONS: dict[str, tuple[str, str]] = {r.name: r.options for r in READOUTS}


def parse_settings(text: str) -> tuple[str, ...]:
    """``--answers``: ``own``, ``constructed`` or ``both``."""
    if text == "both":
        return SETTINGS
    if text not in SETTINGS:
        raise UserError(f"unknown --answers '{text}' (choose from own, constructed, both)")
    return (text,)


def constructed_pairs(items: Sequence[QAItem]) -> list[dict[str, Any]]:
    """Gold (label 1) and wrong (label 0) answer per item; items without a wrong answer give only
    their gold row, which still counts but cannot pair."""
    pairs = []
    for it in items:
        wrong: str | None
        if it.choices is not None:
            gold = it.gold_text
            wrong_letter = next(x for x in LETTERS if x != it.gold_letter)
            wrong = f"{wrong_letter}. {it.choices[LETTERS.index(wrong_letter)]}"
        else:
            gold, wrong = it.aliases[0], it.wrong
        pairs.append({"item_id": it.id, "question": it.prompt, "answer": gold, "answer_source": "gold", "label": 1.0, "matched": None})
        if wrong:
            pairs.append({"item_id": it.id, "question": it.prompt, "answer": wrong, "answer_source": "wrong", "label": 0.0, "matched": None})
    return pairs


def own_pairs(items: Sequence[QAItem], answers: Sequence[Answer]) -> list[dict[str, Any]]:
    """The model's own answer per item, labelled by the correctness rule."""
    pairs = []
    for it, ans in zip(items, answers):
        ok, matched = judge_answer(it, ans.text)
        pairs.append(
            {
                "item_id": it.id,
                "question": it.prompt,
                "answer": ans.text,
                "answer_source": "own",
                "label": float(ok),
                "matched": matched,
                "answer_tokens": ans.n_tokens,
                "answer_finish": ans.finish_reason,
            }
        )
    return pairs


def score_pair_rows(
    model: LanguageModel,
    pairs: Sequence[Mapping[str, Any]],
    *,
    instruct: bool = True,
    continuation_tokens: int = CONTINUATION_TOKENS,
) -> list[dict[str, Any]]:
    """One row per (pair, readout): the pair's fields, then the readout's row from
    :func:`~sleight.readout.ptrue.readouts.score_pairs`. ``readout ptrue`` and ``readout audit --preset ptrue``
    both record these rows."""
    scored = score_pairs(
        model, [p["question"] for p in pairs], [p["answer"] for p in pairs], instruct=instruct, continuation_tokens=continuation_tokens
    )
    n = len(READOUTS)
    return [{**p, **row} for k, p in enumerate(pairs) for row in scored[k * n : (k + 1) * n]]


def run_ptrue(
    model: LanguageModel,
    items: Sequence[QAItem],
    *,
    settings: Sequence[str] = SETTINGS,
    instruct: bool = True,
    max_new_tokens: int = ANSWER_MAX_NEW_TOKENS,
    continuation_tokens: int = CONTINUATION_TOKENS,
    status: Callable[[str], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """All model work: one row per (setting, pair, readout).

    ``score`` is the readout's value: log P(True) for Library (the library's own number; ``exp`` of
    it is in ``library_prob``), a probability in [0, 1] for the others, None where a label's
    boundary is not preserved in context. ``instruct`` as in lm-polygraph: False answers and scores
    the raw prompt strings, with no chat template.
    """
    if not items:
        raise UserError("no items to run")
    say = status or (lambda _msg: None)
    pairs: list[dict[str, Any]] = []
    if "own" in settings:
        say(f"answering {len(items)} questions greedily")
        answers = greedy_answers(model, items, max_new_tokens, instruct=instruct, progress=progress)
        pairs += [{"setting": "own", **p} for p in own_pairs(items, answers)]
    if "constructed" in settings:
        pairs += [{"setting": "constructed", **p} for p in constructed_pairs(items)]
    say(f"{len(READOUTS)} P(True) readouts of {len(pairs)} (question, answer) pairs")
    return score_pair_rows(model, pairs, instruct=instruct, continuation_tokens=continuation_tokens)


# ---------------------------------------------------------------------------------------------
# scoring (pure)
# ---------------------------------------------------------------------------------------------


def _setting_summary(rows: Sequence[Mapping[str, Any]], B: int, seed: int, level: float) -> dict[str, Any]:
    by_r = {r: [x for x in rows if x["readout"] == r] for r in READOUT_NAMES}
    ref = by_r["library"]
    y = np.asarray([x["label"] for x in ref], dtype=np.float64)
    clusters = cluster_codes([x["item_id"] for x in ref])
    scores = {r: np.asarray([np.nan if x["score"] is None else x["score"] for x in by_r[r]], dtype=np.float64) for r in READOUT_NAMES}
    out: dict[str, Any] = {
        "n_pairs": len(ref),
        "n_clusters": int(np.unique(clusters).size) if len(ref) else 0,
        "n_correct": int(y.sum()),
        "rate_correct": float(y.mean()) if y.size else math.nan,
        "readouts": {},
        "vs_library": {},
    }
    for r in READOUT_NAMES:
        ok = np.isfinite(scores[r])
        rs = by_r[r]
        out["readouts"][r] = {
            "label": READOUT_LABELS[r],
            "n_scored": int(ok.sum()),
            "auroc": metric_interval("auroc", scores[r][ok], y[ok], clusters=clusters[ok], B=B, seed=seed, level=level) if ok.any() else None,
            "prr": metric_interval("prr", scores[r][ok], y[ok], clusters=clusters[ok], B=B, seed=seed, level=level) if ok.any() else None,
            "options": list(READOUT_OPTIONS[r]),
            "mass": mass_summary([x["option_mass"] for x in rs], MASS_FLOOR),
            "first_tokens_distinct": float(np.mean([bool(x["first_tokens_distinct"]) for x in rs])) if rs else math.nan,
            "argmax_class": counts([x["argmax_class"] for x in rs]),
            "argmax_token": counts([x["argmax_token"] for x in rs]),
            "continuation_class": counts([x["continuation_class"] for x in rs]),
        }
        if r == "library":
            continue
        both = ok & np.isfinite(scores["library"])
        out["vs_library"][r] = {
            m: paired_difference(
                m, scores[r][both], scores["library"][both], y[both], clusters=clusters[both], B=B, seed=seed, level=level, name_a=r, name_b="library"
            )
            if both.any()
            else None
            for m in ("auroc", "prr")
        }
    return out


def summarise(rows: Sequence[Mapping[str, Any]], *, B: int = 20000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Per setting: AUROC/PRR with intervals per readout, paired differences against Library, and
    the scored-position diagnostics; JSON-ready."""
    out: dict[str, Any] = {"B": B, "seed": seed, "level": level, "settings": {}}
    for s in SETTINGS:
        srows = [r for r in rows if r["setting"] == s]
        if srows:
            out["settings"][s] = _setting_summary(srows, B, seed, level)
    return clean(out)


__all__ = [
    "ANSWER_MAX_NEW_TOKENS",
    "READOUT_LABELS",
    "READOUT_OPTIONS",
    "SETTINGS",
    "constructed_pairs",
    "score_pair_rows",
    "own_pairs",
    "parse_settings",
    "run_ptrue",
    "summarise",
]
