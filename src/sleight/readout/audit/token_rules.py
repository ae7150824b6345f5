"""Appendix D's two token-level prediction rules for a substituted instruction, both scored on the
unrestricted argmax at the original ending (space-appended on Mistral and falcon).

* The opening-word rule: the argmax is the substituted instruction's own opening word
  ("List", "Translate", "Count"...), once whitespace and a word-boundary marker are stripped.
* The token-class rule: the item's own letter instruction predicts an answer letter, the empty
  ending and "Reply with a single integer." a digit, the other four substitutes a prose word; a
  check holds when the predicted class is the argmax on more than half of the items.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sleight.readout.audit.variants import SUBSTITUTES

_MARKERS = "\u0120\u2581\u010a"  # byte-level space, sentencepiece word boundary, byte-level newline
PREDICTED_CLASS: dict[str, str] = {
    "instruction": "answer_letter",  # the item's own "Answer with exactly one of: A, B, C, D."
    "empty": "digit",
    "integer": "digit",
    "summarise": "prose",
    "keywords": "prose",
    "french": "prose",
    "count": "prose",
}


def bare_token(token: str) -> str:
    """A token's text without surrounding whitespace and a tokeniser's leading word-boundary marker."""
    return token.strip().lstrip(_MARKERS).strip()


def opening_word(instruction: str) -> str:
    """The instruction's first word, without punctuation ("" for the empty ending)."""
    m = re.match(r"\s*([^\W_]+)", instruction)
    return m.group(1) if m else ""


def opening_word_match(token: str, ending: str) -> bool:
    """App. D opening-word rule: the argmax is the substitute's own opening word (``ending``: a key
    of :data:`SUBSTITUTES`)."""
    word = opening_word(SUBSTITUTES[ending])
    return bool(word) and bare_token(token) == word


def opening_word_rate(tokens: Sequence[str], ending: str) -> float:
    """App. D: the opening-word rule's rate over one cell's items."""
    return sum(opening_word_match(t, ending) for t in tokens) / len(tokens) if tokens else float("nan")


def token_class(token: str, letters: Sequence[str] = ("A", "B", "C", "D")) -> str:
    """App. D's classes of an argmax: ``answer_letter``, ``digit``, ``whitespace`` or ``prose``
    (any other token: a word, a word piece, punctuation)."""
    if not token.strip(" \t\n" + _MARKERS):
        return "whitespace"
    t = bare_token(token)
    if t in letters:
        return "answer_letter"
    return "digit" if t.isdigit() else "prose"


def token_class_check(tokens: Sequence[str], ending: str, letters: Sequence[str] = ("A", "B", "C", "D")) -> bool:
    """App. D token-class rule: the class predicted for ``ending`` (``instruction`` or a substitute
    key) is the argmax class on more than half of the items."""
    want = PREDICTED_CLASS[ending]
    return 2 * sum(token_class(t, letters) == want for t in tokens) > len(tokens)
