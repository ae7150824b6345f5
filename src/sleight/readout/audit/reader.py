"""The note-only reader scored by the letter it writes (App. C.7): a greedy continuation of at most
16 new tokens from the reader's rendered prompt, read as its first standalone letter.

C.7 compares three readings of the same reader: the highest full-sequence log-probability among
" A".." D" (spaced, Table 4's target), among "A".."D" (unspaced), and this generated letter; the
forecast's AUC is reported against each. A continuation naming no letter has no generated answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from sleight.backends import LanguageModel
from sleight.readout.ptrue.answers import first_standalone_letter

READER_LETTERS: tuple[str, ...] = ("A", "B", "C", "D")
READER_GENERATED_TOKENS = 16  # App. C.7: a greedy continuation of at most 16 tokens


def generated_letter(text: str, letters: Sequence[str] = READER_LETTERS) -> str | None:
    """App. C.7: the continuation's first standalone letter (not touching another letter or digit;
    the rule App. E labels MMLU answers with, :func:`~sleight.readout.ptrue.answers.first_standalone_letter`)."""
    return first_standalone_letter(text, letters)


def reader_generated_letters(
    model: LanguageModel, contexts: Sequence[Sequence[int]], max_new_tokens: int = READER_GENERATED_TOKENS
) -> list[str | None]:
    """App. C.7: each rendered reader context continued greedily, read as its first standalone letter."""
    outs = model.generate_until(contexts, max_new_tokens)
    return [generated_letter(model.decode(o.token_ids)) for o in outs]


def letter_correct(letter: str | None, gold: str) -> bool | None:
    """The reader's correctness by a letter it chose or wrote (any of C.7's three readings; None where
    it names no letter, so an item without an answer is left out rather than counted wrong)."""
    return (letter == gold) if letter else None
