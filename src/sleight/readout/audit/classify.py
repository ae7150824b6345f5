"""Fixed, documented rules that name what the model would do at the scored position.

Argmax token classes, first rule that matches wins (precedence):

1. ``special`` -- a special token of the tokenizer (end of turn, ``<|im_start|>``...);
2. ``option`` -- the first token (in context) of a declared option;
3. ``answer_letter`` -- a letter of the quoted item (A-D by default), alone or with a leading space,
   an opening parenthesis, markdown ``*``, or a closing ``)``/``.``/``:`` (``" A"``, ``"(B"``, ``"C)"``);
4. ``digit`` -- digits only (after stripping spaces), e.g. ``"7"``;
5. ``whitespace`` -- spaces, tabs, newlines only;
6. ``prose`` -- anything else (a word, a word piece, punctuation).

``option`` precedes ``answer_letter`` so a readout whose options *are* letters (P(True)'s "Moved")
counts as reading its options.

Continuation classes (what the model writes first; leading whitespace and markdown ``*``/``#``
ignored), first rule that matches wins:

1. ``other`` if nothing but whitespace was written;
2. ``recites`` if it starts by repeating the list or the question: a lettered choice line followed by
   another lettered line (``A. ...\\nB. ...``), the first three grid options in order (``10, 30, 50``),
   or the first 32 characters (case and spacing folded) of the quoted question or of the prompt's
   last line;
3. ``forecast`` if it starts with a declared option (numbers as whole numbers, text as a whole
   word, case folded): the readout's own kind of answer;
4. ``answers_item`` if it starts by answering the quoted item: a letter of the item followed by
   ``.``, ``)``, ``:``, ``,``, a line end or the end (``"B."``, ``"(C)"``), or by the start of that
   choice's text; ``Answer: B`` / ``The correct answer is (B)``; or the start of a choice's text
   (its first 24 characters, case folded);
5. ``forecast`` if it starts with a number or percentage (after an optional ``about``,
   ``approximately``, ``around``, ``roughly``, ``~``), or with ``Out of 100`` followed in the same
   sentence by another number;
6. ``prose`` if it starts with a letter;
7. ``other`` otherwise.

Flags: ``grid_anywhere`` -- a declared option (numbers as whole numbers, text as whole words) occurs
anywhere; ``answer_then_grid`` -- ``answers_item`` and a declared option occurs after the answer.
``on_task`` -- the first thing written is a declared option (rule 3, or a hedged number of the
grid under rule 5).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

ARGMAX_CLASSES = ("answer_letter", "option", "digit", "whitespace", "prose", "special")
CONTINUATION_CLASSES = ("answers_item", "forecast", "recites", "prose", "other")

_NUM = r"\d+(?:[.,]\d+)?"
_HEDGE = r"(?:(?:about|approximately|around|roughly|nearly|~|≈)\s*)?"
_FORECAST = re.compile(rf"^{_HEDGE}({_NUM})\s*(?:%|percent\b)?", re.IGNORECASE)
_OUT_OF = re.compile(rf"^out of 100\b[^.!?\n\d]*?({_NUM})", re.IGNORECASE)


def classify_token(text: str, *, is_special: bool, is_option_first: bool, letters: Sequence[str]) -> str:
    """Class of one token (see the module docstring for the precedence)."""
    if is_special:
        return "special"
    if is_option_first:
        return "option"
    s = text.strip()
    m = re.fullmatch(r"\*{0,2}\(?([A-Za-z])[).:]?", s)
    if m and m.group(1) in letters:
        return "answer_letter"
    if s and s.isdigit():
        return "digit"
    if not s:
        return "whitespace"
    return "prose"


def is_numeric(options: Sequence[str]) -> bool:
    return bool(options) and all(re.fullmatch(r"\s*-?\d+\s*", o) for o in options)


def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _option_pattern(option: str, numeric: bool) -> re.Pattern[str]:
    o = re.escape(option.strip())
    return re.compile(rf"(?<!\d){o}(?!\d)" if numeric else rf"(?<!\w){o}(?!\w)")


@dataclass(frozen=True)
class ContinuationReading:
    cls: str
    answer_then_grid: bool
    grid_anywhere: bool
    on_task: bool


def _answers_item(s: str, letters: Sequence[str], choices: Sequence[str]) -> int | None:
    """End position of an answer to the quoted item at the start of ``s``, else None."""
    if letters:
        lset = "".join(re.escape(x) for x in letters)
        m = re.match(rf"^\(?([{lset}])\)?(?=[.):,]|\s*\n|\s*$)[.):,]?", s)
        if m:
            return m.end()
        m = re.match(rf"^\(?([{lset}])\)?\s+", s)
        if m and choices and m.group(1) in letters:
            idx = list(letters).index(m.group(1))
            if idx < len(choices) and _fold(s[m.end() :]).startswith(_fold(choices[idx])[:12]):
                return m.end() + len(choices[idx])
        m = re.match(
            rf"^(?:the\s+)?(?:correct\s+|right\s+|best\s+)?answer\s*(?:is|would be|:)\s*:?\s*\(?([{lset}])\b\)?",
            s,
            re.IGNORECASE,
        )
        if m:
            return m.end()
    folded = _fold(s)
    for choice in choices or ():
        head = _fold(choice)[:24]
        if len(head) >= 3 and folded.startswith(head):
            return min(len(s), len(choice))
    return None


def _recites(s: str, options: Sequence[str], letters: Sequence[str], echoes: Sequence[str]) -> bool:
    if letters:
        lset = "".join(re.escape(x) for x in letters)
        lines = [ln.strip() for ln in s.splitlines() if ln.strip()]
        pat = re.compile(rf"^\(?([{lset}])[).:]\s")
        if lines and pat.match(lines[0]):
            labels = {m.group(1) for m in map(pat.match, lines) if m}
            if len(labels) >= 2:
                return True
    if len(options) >= 3:
        seq = r"\s*,\s*".join(re.escape(o.strip()) for o in options[:3])
        if re.match(rf"^{seq}\b", s):
            return True
    folded = _fold(s)
    for echo in echoes:
        head = _fold(echo)[:32]
        if len(head) >= 12 and folded.startswith(head):
            return True
    return False


def classify_continuation(
    text: str,
    *,
    options: Sequence[str],
    letters: Sequence[str] = ("A", "B", "C", "D"),
    choices: Sequence[str] | None = None,
    echoes: Sequence[str] = (),
) -> ContinuationReading:
    """Class and flags of a greedy continuation (rules in the module docstring).

    ``echoes``: texts whose repetition counts as reciting (the quoted question, the prompt's last line).
    """
    numeric = is_numeric(options)
    pats = [_option_pattern(o, numeric) for o in options]
    s = re.sub(r"^[\s*#]+", "", text)
    grid_anywhere = any(p.search(s) for p in pats)
    if not s.strip():
        return ContinuationReading("other", False, False, False)
    if _recites(s, options, letters, echoes):
        return ContinuationReading("recites", False, grid_anywhere, False)
    if _starts_with_option(s, options, numeric):
        return ContinuationReading("forecast", False, grid_anywhere, True)
    end = _answers_item(s, letters, choices or ())
    if end is not None:
        return ContinuationReading("answers_item", any(p.search(s[end:]) for p in pats), grid_anywhere, False)
    m = _FORECAST.match(s) or _OUT_OF.match(s)
    if m:
        on_task = numeric and any(m.group(1) == o.strip() for o in options)
        return ContinuationReading("forecast", False, grid_anywhere, on_task)
    if re.match(r"^[^\W\d_]", s):
        return ContinuationReading("prose", False, grid_anywhere, False)
    return ContinuationReading("other", False, grid_anywhere, False)


def _starts_with_option(s: str, options: Sequence[str], numeric: bool) -> bool:
    for o in options:
        o = o.strip()
        if not o:
            continue
        if numeric:
            if re.match(rf"^{re.escape(o)}(?!\d)", s):
                return True
        elif re.match(rf"^{re.escape(o)}(?!\w)", s, re.IGNORECASE):
            return True
    return False
