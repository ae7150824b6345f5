"""Table 3's fixed-note items and Appendix I's eight prompt conditions, as audit items; App. I's
answer-letter rule and letter pull.

* Table 3 / C0: the production forecast prompt (App. B) on the first 64 frozen RACE-H items, with
  one fixed note for every item (:data:`FIXED_NOTE`, App. C.1: Qwen3-4B's note for high2565.txt,
  quotation marks removed).
* N1: per-item notes (App. I: Qwen3-4B-Instruct-2507's own, twelve-word budget) in C0's place;
  S1: the forecast instruction in a system turn, the user turn "Note: ... Quoted question: ...";
  D1: MMLU-Pro items, the block ``question / rows / Answer with exactly one of: letters.``;
  A1, A2: one and two of T1's sentences inserted before the forecast question; T1, T2: the two
  whole templates a language model wrote, with their own answer stems.
* The answer-letter rule: the argmax, stripped of whitespace and a tokeniser's word-boundary
  marker, is one of the item's own letters, except Llama-3-8B-Instruct's article "A" when its
  continuation opens "A clever", "A classic" or "A nice" (prose). Letter pull: that on at least half
  of the items. Table 14 counts the letters with the article (its caption: Llama's counted letters
  are the article); Table 15's letter pull leaves it out.
* Table 15: what holds the scored position of one checkpoint under one condition
  (:func:`holding`), from the per-item readings (mass, argmax, first tokens, rendered ending).

``inferred:`` the paper's conversion loses the prompts' line breaks (their boxes mark typeset breaks
only); S1's user turn and T1/T2 are laid out here with a blank line between their parts, T2's
block markers on their own lines.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from sleight.errors import UserError
from sleight.readout.audit.items import AuditItem
from sleight.readout.audit.presets import (
    FORECAST_ITEM_INSTRUCTION,
    FORECAST_LEAD,
    FORECAST_OPTIONS,
    FORECAST_QUESTION,
    FORECAST_STEM,
    choices_block,
)

FIXED_NOTE = "Landlord only gives when told to take, not give."  # Table 3 caption, App. C.1
FROZEN_ITEMS = 64  # Table 3 / App. I: the first 64 RACE-H items of A.1's list, frozen order
CONDITIONS: tuple[str, ...] = ("C0", "N1", "S1", "D1", "A1", "A2", "T1", "T2")
N1_NOTE_WORDS = 12  # App. I: N1's notes were written with a twelve-word budget
FLOOR = 0.5  # §3: the diagnostic floor of the option mass

S1_SYSTEM = (
    "You will be given a note and a quoted question. A future reader will be shown ONLY the note, not the "
    "source text, and will then be asked the quoted question. Out of 100 such readers, how many answer "
    "correctly? Reply with exactly one of: 10, 30, 50, 70, 90."
)
S1_USER = "Note: {note}\n\nQuoted question: {q}"
A1_SENTENCE = "The question's instruction to answer with a letter is for the readers."
A2_SENTENCE = "Your task is to forecast their number of correct answers."
T1_TEMPLATE = (
    "Someone read a passage and wrote the short note below. Imagine 100 readers who will see only this note and "
    "the question below, including its final answer instruction. They will never see the passage. Each reader "
    "will answer the question, and correctness will be judged against the original passage.\n\n"
    "Note: {note}\n\n"
    "Question: {q}\n\n"
    "Estimate how many of these 100 readers will answer correctly. Consider how much useful information the note "
    "provides, whether it distinguishes the choices, and where readers may misunderstand or have to guess. "
    "The question\u2019s instruction to answer with a letter is for the readers. Your task is to forecast their "
    "number of correct answers. Choose the closest of these five counts to your estimate: 10, 30, 50, 70, 90. "
    "Reply with exactly one of these values and nothing else."
)
T1_STEM = "Estimate: "
T2_TEMPLATE = (
    "OUTPUT CONTRACT\nReturn one bare value from this set: 10, 30, 50, 70, 90.\n\n"
    "FORECAST TARGET\nNumber of correct answers among 100 readers taking a reading-comprehension test. Each reader "
    "receives only a short note written by someone who read the passage, plus the complete test item below. Neither "
    "you nor the readers receive the passage. The passage\u2019s answer key determines correctness.\n\n"
    "TEST ITEM SHOWN TO READERS\nBEGIN TEST ITEM\n{q}\nEND TEST ITEM\n\n"
    "NOTE AVAILABLE TO READERS\nBEGIN NOTE\n{note}\nEND NOTE\n\n"
    "ASSESSMENT PROCEDURE\n"
    "1. Identify what information the item asks readers to recover from the passage.\n"
    "2. Assess which choices the note supports or rules out. Account for missing or ambiguous information, "
    "plausible mistakes, and guessing.\n"
    "3. Estimate how many readers will select the correct answer, then select the nearest permitted count.\n\n"
    "Keep the assessment to yourself. The letter-answer instruction inside the test item governs the readers\u2019 "
    "answers. Your response must follow the output contract: exactly one of 10, 30, 50, 70, 90, with no label, "
    "explanation, punctuation, or percent sign."
)
T2_STEM = "Predicted number correct: "
STEMS: dict[str, str] = {c: FORECAST_STEM for c in CONDITIONS} | {"T1": T1_STEM, "T2": T2_STEM}
LETTERS_AD: tuple[str, ...] = ("A", "B", "C", "D")
ARTICLE_OPENINGS: tuple[str, ...] = ("A clever", "A classic", "A nice")  # App. I: Llama-3-8B-Instruct's article
_MARKERS = "\u0120\u2581\u010a"  # byte-level space, sentencepiece word boundary, byte-level newline


def quoted_block(question: str, options: Sequence[str], letters: Sequence[str] | None = None) -> tuple[str, str, str]:
    """The quoted item (question, lettered rows, its letter instruction) as App. B / D1 print it;
    returns (block, rows, instruction). RACE-H: A-D and C0's instruction; D1: letters A.. to the
    last option and "Answer with exactly one of: <letters>."."""
    letters = tuple(letters or [chr(ord("A") + k) for k in range(len(options))])
    if len(letters) != len(options):
        raise UserError(f"{len(options)} options but {len(letters)} letters")
    rows = "\n".join(f"{x}: {o}" for x, o in zip(letters, options)) if len(letters) != 4 else choices_block(options)
    instruction = FORECAST_ITEM_INSTRUCTION if tuple(letters) == LETTERS_AD else f"Answer with exactly one of: {', '.join(letters)}."
    return f"{question}\n{rows}\n{instruction}", rows, instruction


def condition_messages(condition: str, note: str, q: str) -> tuple[dict[str, str], ...]:
    """App. I: the chat of one condition for a note and a quoted block ``q`` (C0, N1 and D1 share
    C0's template; N1 and D1 differ in what they pass)."""
    c0 = f"Note: {note}\n\n{FORECAST_LEAD}\n\n{q}\n\n{FORECAST_QUESTION}"
    if condition in ("C0", "N1", "D1"):
        return ({"role": "user", "content": c0},)
    if condition == "S1":
        return ({"role": "system", "content": S1_SYSTEM}, {"role": "user", "content": S1_USER.format(note=note, q=q)})
    if condition in ("A1", "A2"):
        insert = A1_SENTENCE + " " + (A2_SENTENCE + " " if condition == "A2" else "")
        return ({"role": "user", "content": c0.replace(FORECAST_QUESTION, insert + FORECAST_QUESTION, 1)},)
    if condition in ("T1", "T2"):
        return ({"role": "user", "content": (T1_TEMPLATE if condition == "T1" else T2_TEMPLATE).format(note=note, q=q)},)
    raise UserError(f"unknown App. I condition '{condition}' (choose from {', '.join(CONDITIONS)})")


def condition_items(
    condition: str,
    records: Sequence[Mapping[str, Any]],
    *,
    notes: Sequence[str] | None = None,
    note: str = FIXED_NOTE,
    n: int = FROZEN_ITEMS,
    own_stem: bool = True,
) -> list[AuditItem]:
    """App. I (Table 14): audit items of one condition over the first ``n`` records in their order.
    Records are RACE-H items (``id, question, choices, answer``) or, for D1, MMLU-Pro rows
    (``id, question, options`` of 2-10). ``notes``: N1's per-item notes (required there); every
    other condition uses ``note`` (:data:`FIXED_NOTE`). ``own_stem`` False: T1/T2 read with C0's stem."""
    if condition not in CONDITIONS:
        raise UserError(f"unknown App. I condition '{condition}' (choose from {', '.join(CONDITIONS)})")
    recs = list(records)[:n]
    if condition == "N1" and (notes is None or len(notes) < len(recs)):
        raise UserError("condition N1 needs one note per item (App. I: the per-item notes)")
    items = []
    for k, rec in enumerate(recs):
        opts = list(rec.get("options") or rec.get("choices") or [])
        letters = None if condition == "D1" else LETTERS_AD
        q, rows, instruction = quoted_block(str(rec["question"]), opts, letters)
        text = notes[k] if condition == "N1" and notes is not None else note
        stem = STEMS[condition] if own_stem else FORECAST_STEM
        items.append(
            AuditItem(
                id=str(rec["id"]),
                messages=condition_messages(condition, text, q),
                options=FORECAST_OPTIONS,
                quoted_instruction=instruction,
                choices_block=rows,
                quoted=q,
                choices=tuple(opts),
                question=str(rec["question"]),
                letters=tuple(letters or [chr(ord("A") + j) for j in range(len(opts))]),
                stem=stem,
                meta={"condition": condition, "note": text, "gold": rec.get("answer")},
            )
        )
    return items


def fixed_note_items(records: Sequence[Mapping[str, Any]], *, note: str = FIXED_NOTE, n: int = FROZEN_ITEMS) -> list[AuditItem]:
    """Table 3: the production prompt with one fixed note over the first ``n`` frozen RACE-H items."""
    return condition_items("C0", records, note=note, n=n)


def is_answer_letter(token: str, letters: Sequence[str] = LETTERS_AD, continuation: str | None = None) -> bool:
    """App. I: the argmax token, stripped of whitespace and a leading word-boundary marker, is one of
    the item's letters -- not the article "A" when the continuation opens as prose ("A clever",
    "A classic", "A nice": Llama-3-8B-Instruct)."""
    t = token.strip().lstrip(_MARKERS).strip()
    if t not in letters:
        return False
    return not (t == "A" and continuation is not None and continuation.lstrip().startswith(ARTICLE_OPENINGS))


def letter_pull(tokens: Sequence[str], letters: Sequence[Sequence[str]], continuations: Sequence[str | None]) -> bool:
    """App. I / Table 15: an item's own answer letter is the argmax on at least half of the items."""
    hits = sum(is_answer_letter(t, lt, c) for t, lt, c in zip(tokens, letters, continuations))
    return 2 * hits >= len(tokens) > 0


def is_prose_opening(token: str, letters: Sequence[str] = LETTERS_AD, continuation: str | None = None) -> bool:
    """Table 15: the argmax is a word token that opens prose -- a word that is not one of the item's
    letters ("Answer", "The"), or the article "A" that :func:`is_answer_letter` leaves out."""
    t = token.strip().lstrip(_MARKERS).strip()
    if t in letters:
        return is_answer_letter(t, letters) and not is_answer_letter(t, letters, continuation)
    return t.isalpha()


def letter_columns(token: str, letters: Sequence[str], continuation: str | None) -> dict[str, bool]:
    """One reading's App. I letter columns: ``letter`` (Table 14's count, the article counted),
    ``letter_pull`` (Table 15's, the article left out) and ``prose_opening``."""
    return {
        "letter": is_answer_letter(token, letters),
        "letter_pull": is_answer_letter(token, letters, continuation),
        "prose_opening": is_prose_opening(token, letters, continuation),
    }


HOLDING: tuple[str, ...] = (
    "below_floor",
    "answer_letters",
    "letters_separated",
    "omitted_separator",
    "shared_first_token",
    "prose_holds",
    "below_other",
    "options_hold",
    "repaired",
)  # Table 15's rows, in its order


def _half(flags: Sequence[bool]) -> bool:
    return 2 * sum(flags) >= len(flags) > 0


def holding(original: Sequence[Mapping[str, Any]], stemmed: Sequence[Mapping[str, Any]], floor: float = FLOOR) -> dict[str, bool]:
    """Table 15: what holds one checkpoint's scored position under one condition, from its per-item
    readings at the original ending (``option_mass``, ``letter_pull``, ``prose_opening``,
    ``first_tokens_distinct``, ``ends_with_whitespace``, ``options``) and with the condition's own
    stem (``option_mass``). Below the floor: the median mass under ``floor``; the rows under it
    hold only where it does (they may overlap) -- answer letters (letter pull: at least half the
    items), of which those with the separator present and distinct first tokens; an omitted
    separator (the rendered ending has no whitespace and the options begin with none); a shared
    first token (the options' in-context first tokens coincide); a prose opening (at least half);
    none of these. Options hold: the median at or above the floor with distinct first tokens.
    Repaired: the stemmed median at or above the floor. ``inferred:`` a per-item property holds for
    the condition where it holds on at least half the items (the paper's templates make them
    uniform)."""
    masses = [float(r["option_mass"]) for r in original if r.get("option_mass") is not None]
    below = not masses or statistics.median(masses) < floor
    letters = _half([bool(r.get("letter_pull")) for r in original])
    omitted = _half([not r.get("ends_with_whitespace") and not any(str(o)[:1].isspace() for o in r.get("options") or ()) for r in original])
    shared = _half([r.get("first_tokens_distinct") is False for r in original])
    prose = _half([bool(r.get("prose_opening")) for r in original])
    stem = [float(r["option_mass"]) for r in stemmed if r.get("option_mass") is not None]
    return {
        "below_floor": below,
        "answer_letters": below and letters,
        "letters_separated": below and letters and not omitted and not shared,
        "omitted_separator": below and omitted,
        "shared_first_token": below and shared,
        "prose_holds": below and prose,
        "below_other": below and not (letters or omitted or shared or prose),
        "options_hold": not below and not shared,
        "repaired": bool(stem) and statistics.median(stem) >= floor,
    }
