"""Published text parsers applied to a model's greedy reply, and the contrast that exposes them.

A text parser reads a verdict from what the model wrote, not from a probability. OpenCompass's
LLM-judge graders take the first ``A`` or ``B`` anywhere in the judge's reply
(``_generic_llmjudge_postprocess`` in ``opencompass/datasets/generic.py``: ``re.search('(A|B)')``,
no word boundaries, so the ``B`` of "Based" counts). When the grader prompt quotes a lettered item,
a judge that answers the quoted item ("B") instead of grading is read as a verdict.

:func:`rotation_contrast` is the study's test for it: the same item is graded with its choices
rotated so the gold letter sits at A, B, C and D, the candidate's answer always correct. A grader
that judges says A every time; a reply that answers the quoted item follows the gold letter, so its
verdict is A when the gold is A and B when the gold is B, and neither when the gold is C or D.

Pure functions; no model. The contrast is a frozen record (:class:`RotationContrast`) whose
``as_record`` is the JSON object the scan's rows have always held.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

UNKNOWN = "unknown"


def first_uppercase_ab(text: str, true_tag: str = "A", false_tag: str = "B") -> str:
    """OpenCompass's parser: the first ``true_tag`` or ``false_tag`` in ``text``, else ``unknown``."""
    m = re.search(rf"({re.escape(true_tag)}|{re.escape(false_tag)})", text)
    return m.group(0) if m else UNKNOWN


TEXT_PARSERS: dict[str, Callable[[str], str]] = {"first_uppercase_ab": first_uppercase_ab}


def _rate(hits: Sequence[bool]) -> float | None:
    return float(sum(hits)) / len(hits) if hits else None


@dataclass(frozen=True)
class LetterContrast:
    """For one verdict letter ``L``: ``P(verdict = L | gold = L)``, ``P(verdict = L | gold not a
    verdict letter)`` and their difference (None where either side has no reply)."""

    at_gold: float | None
    gold_elsewhere: float | None
    contrast: float | None

    def as_record(self) -> dict[str, float | None]:
        return {"at_gold": self.at_gold, "gold_elsewhere": self.gold_elsewhere, "contrast": self.contrast}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> LetterContrast:
        return cls(d["at_gold"], d["gold_elsewhere"], d["contrast"])


@dataclass(frozen=True)
class RotationContrast:
    """What :func:`rotation_contrast` measures over a grader's parsed replies (fields in the order
    of the JSON keys the scan writes)."""

    n_replies: int
    n_items: int
    letter_rate: float | None
    accuracy: float | None
    unknown_rate: float | None
    per_letter: Mapping[str, LetterContrast]
    contrast: float | None
    tracking_items: tuple[str, ...]
    verdicts_by_gold: Mapping[str, Mapping[str, int]]

    def as_record(self) -> dict[str, object]:
        return {
            "n_replies": self.n_replies, "n_items": self.n_items, "letter_rate": self.letter_rate, "accuracy": self.accuracy,
            "unknown_rate": self.unknown_rate, "per_letter": {k: v.as_record() for k, v in self.per_letter.items()},
            "contrast": self.contrast, "tracking_items": list(self.tracking_items),
            "verdicts_by_gold": {g: dict(vs) for g, vs in self.verdicts_by_gold.items()},
        }

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> RotationContrast:
        return cls(
            int(d["n_replies"]), int(d["n_items"]), d["letter_rate"], d["accuracy"], d["unknown_rate"],
            {str(k): LetterContrast.from_record(v) for k, v in d["per_letter"].items()}, d["contrast"],
            tuple(str(i) for i in d["tracking_items"]), {str(g): {str(v): int(n) for v, n in vs.items()} for g, vs in d["verdicts_by_gold"].items()},
        )


def rotation_contrast(
    replies: Sequence[Mapping[str, object]],
    verdict_letters: Sequence[str] = ("A", "B"),
    correct_verdict: str = "A",
) -> RotationContrast:
    """How much the parsed verdicts follow the quoted item's gold letter.

    ``replies``: one mapping per (item, rotation) with ``item``, ``gold_letter`` and ``verdict``.
    Reports, per verdict letter ``L``, ``P(verdict = L | gold = L) - P(verdict = L | gold not a
    verdict letter)`` (``contrast``, their mean; 0 for a grader that ignores where the gold sits),
    the share of replies whose verdict is the gold letter while that letter is a verdict letter
    (``letter_rate``), accuracy against ``correct_verdict``, and the items whose verdict equals the
    gold letter at every verdict-letter rotation (``tracking_items``: the letter read as a verdict).
    """
    by_gold: dict[str, list[str]] = defaultdict(list)
    by_item: dict[str, dict[str, str]] = defaultdict(dict)
    for r in replies:
        by_gold[str(r["gold_letter"])].append(str(r["verdict"]))
        by_item[str(r["item"])][str(r["gold_letter"])] = str(r["verdict"])
    others = [v for g, vs in by_gold.items() if g not in verdict_letters for v in vs]
    per_letter: dict[str, LetterContrast] = {}
    for L in verdict_letters:
        at = _rate([v == L for v in by_gold.get(L, [])])
        away = _rate([v == L for v in others])
        per_letter[L] = LetterContrast(at, away, None if at is None or away is None else at - away)
    contrasts = [d.contrast for d in per_letter.values() if d.contrast is not None]
    tracking = sorted(i for i, rot in by_item.items() if all(L in rot and rot[L] == L for L in verdict_letters))
    all_v = [str(r["verdict"]) for r in replies]
    return RotationContrast(
        n_replies=len(replies),
        n_items=len(by_item),
        letter_rate=_rate([v == g for g in verdict_letters for v in by_gold.get(g, [])]),
        accuracy=_rate([v == correct_verdict for v in all_v]),
        unknown_rate=_rate([v == UNKNOWN for v in all_v]),
        per_letter=per_letter,
        contrast=float(sum(contrasts) / len(contrasts)) if contrasts else None,
        tracking_items=tuple(tracking),
        verdicts_by_gold={g: dict(sorted({v: vs.count(v) for v in set(vs)}.items())) for g, vs in sorted(by_gold.items())},
    )


# -- the forecast's continuation readout (f) --------------------------------------------------------
def first_grid_value(text: str, grid: Sequence[str]) -> str | None:
    """The first value of the declared grid written in ``text`` as a whole number, else None."""
    alts = "|".join(re.escape(g.strip()) for g in sorted(grid, key=len, reverse=True))
    m = re.search(rf"(?<![\d.])({alts})(?![\d]|\.\d)", text)
    return m.group(1) if m else None


def continuation_forecast(text: str, grid: Sequence[str], scale: float = 100.0, missing: float = 0.5) -> float:
    """Readout (f): the first grid value in the greedy continuation over ``scale``, or ``missing``
    (0.5) when the continuation names none."""
    v = first_grid_value(text, grid)
    return missing if v is None else float(int(v)) / scale
