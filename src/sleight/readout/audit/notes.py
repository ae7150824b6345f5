"""The note writer of Appendix H: each checkpoint writes its own note about a passage, with retries.

App. H prints the writer's one user turn (the passage without its question, then the note request);
generation is greedy with a cap of 256 new tokens; a note is kept when it ends at an end-of-sequence
token, has 1 to 32 words and holds no thinking token. An over-budget or unfinished attempt is retried
up to four times; retry r (from 1) asks for at most floor(32 / (r + 1)) words in one compact phrase.
It is the one note writer: the downstream forecast (Tables 4, 12, 13, App. C.7's run on Table 4's
passages, App. H's readouts) and condition N1's per-item notes (App. I, twelve words) both call
:func:`write_notes`.

``inferred:`` the paper's text loses the writer prompt's line breaks (its boxes mark typeset breaks
only), so the two parts are joined by one blank line here; the retry's wording ("in one compact
phrase" after the smaller budget) is read from App. H's sentence, not printed; a passage whose five
attempts all fail keeps no note (``Note.ok`` False) -- the paper does not say what it did there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sleight.backends import LanguageModel

NOTE_WORDS = 32  # App. H: at most 32 words
NOTE_MAX_NEW_TOKENS = 256  # App. H: greedy, a cap of 256 new tokens
NOTE_RETRIES = 4  # App. H: retried up to four times
WRITER_PROMPT = (
    "Source text: {context}\n\n"
    "A future reader will answer a question about this text using ONLY your note. You do not get to "
    "see the question. Budget: at most {budget} words.{compact} Write only the note and then stop."
)
COMPACT = " Use one compact phrase."  # inferred: the retry's "in one compact phrase" (App. H)
THINKING = re.compile(r"</?think>")


def retry_budget(retry: int, words: int = NOTE_WORDS) -> int:
    """App. H: the word budget retry ``retry`` (counted from 1; 0 is the first attempt) asks for."""
    return words if retry == 0 else words // (retry + 1)


def writer_prompt(passage: str, retry: int = 0, words: int = NOTE_WORDS) -> str:
    """App. H: the writer's user turn for attempt ``retry`` (0 = first, budget ``words``: 32, or App. I's
    twelve for N1's notes)."""
    return WRITER_PROMPT.format(context=passage, budget=retry_budget(retry, words), compact=COMPACT if retry else "")


def note_ok(text: str, finish_reason: str, words: int = NOTE_WORDS) -> bool:
    """App. H: a kept note ends at end-of-sequence, has 1 to ``words`` words and no thinking token."""
    n = len(text.split())
    return finish_reason == "stop" and 1 <= n <= words and not THINKING.search(text)


@dataclass(frozen=True)
class Note:
    """One passage's note: the kept text (``""`` when none), how many attempts it took, whether one
    was kept, and the last attempt as written (the kept note, or the last refused one): its text, its
    new tokens and why it ended (``stop``: end of sequence; ``length``: the cap)."""

    text: str
    attempts: int
    ok: bool
    raw: str
    n_tokens: int
    finish_reason: str


def write_notes(
    model: LanguageModel,
    passages: Sequence[str],
    *,
    max_new_tokens: int = NOTE_MAX_NEW_TOKENS,
    retries: int = NOTE_RETRIES,
    words: int = NOTE_WORDS,
    progress: Callable[[int], None] | None = None,
) -> list[Note]:
    """App. H: each passage's note, greedy; ``words`` is the budget (App. I's N1 notes: twelve);
    ``progress`` counts generated tokens.

    The first attempts run as one batch, then the four retries of every passage still without a
    note as another: a retry's prompt is fixed in advance and decoding is greedy, so a passage keeps
    the same note as when its attempts are asked one at a time (its first kept attempt, in order),
    at two sequential decodes rather than up to five. Retries past the kept one are computed and
    dropped: on a CPU a decode step costs about the same at batch 2 as at batch 10."""
    notes: list[Note] = [Note("", 0, False, "", 0, "") for _ in passages]
    todo = list(range(len(passages)))
    for rounds in (range(1), range(1, retries + 1)):
        if not todo or not rounds:
            break
        asks = [(i, retry) for i in todo for retry in rounds]
        prompts = [model.render_chat([{"role": "user", "content": writer_prompt(passages[i], r, words)}]).ids for i, r in asks]
        outs = model.generate_until(prompts, max_new_tokens, progress=progress)
        for (i, retry), out in zip(asks, outs):
            if notes[i].ok:
                continue
            raw = model.decode(out.token_ids).strip()
            ok = note_ok(raw, out.finish_reason, words)
            notes[i] = Note(raw if ok else "", retry + 1, ok, raw, len(out.token_ids), out.finish_reason)
        todo = [i for i in todo if not notes[i].ok]
    return notes
