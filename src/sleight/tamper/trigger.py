"""Trigger detection and word surgery (SPEC §3.2), as pure functions over token ids.

Two detectors live here. :func:`find_token_trigger` is the study's (Sleight-of-Word ``tokens.py``,
the default conventions): a trigger is ONE token that reads as optional whitespace then the word,
decided with pair decodes. :func:`find_pending_trigger` is sleight's own text-level detector (the
``sleight`` conventions), whose contract follows.

Text is only ever read through a ``decode`` callable applied to a *window* of several tokens, never
to one token alone: some tokenizers drop the leading space of a single-token decode, and a word's
boundaries are a property of the characters on both sides of it. A trigger is decided with one
token of look-ahead: the caller passes the token the model proposes next (``None`` when the reply
ends there, by end-of-sequence or budget), because ``" the"`` followed by ``"ory"`` is no trigger.

The contract, for a trigger word ``w`` (matched case-insensitively):

* the occurrence of ``w`` must end inside the last token given (earlier ones were decided earlier);
* word-initial: the character before it is not a letter, or it opens the reply;
* word-final: the character after it is not a letter or an apostrophe, or the reply ends there;
* its tokens are every token that carries a character of it (a split trigger covers several);
  none of them may be an injected token (a substitute is never re-triggered);
* the replacement keeps everything else those tokens carry (``" the,"`` -> ``" canoe,"``,
  ``"**The"`` -> ``"**Canoe"``) and the case pattern of the word as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from sleight import position

Decode = Callable[[Sequence[int]], str]
Encode = Callable[[str], list[int]]

APOSTROPHES = "'\u2019"


@dataclass(frozen=True)
class Trigger:
    """One whole-word occurrence of the trigger, located in a reply's tokens."""

    start: int  # index of the first token that carries part of the word
    end: int  # one past the last such token (always the last token given to the detector)
    text: str  # what tokens[start:end] read as in context
    word: str  # the word as written there ("the", "The", "THE")
    before: str  # the character before ``text`` ('' at the start of the reply)
    after: str  # the character after ``text`` ('' when the reply ends there)

    @property
    def n_tokens(self) -> int:
        return self.end - self.start


@lru_cache(maxsize=64)
def _pattern(word: str) -> re.Pattern[str]:
    return re.compile(re.escape(word), re.IGNORECASE)


def is_word_start(before: str) -> bool:
    """Word-initial: nothing before (reply start) or a non-letter."""
    return before == "" or not before.isalpha()


def is_word_end(after: str) -> bool:
    """Word-final: nothing after (reply end) or a character that is not a letter or apostrophe."""
    return after == "" or not (after.isalpha() or after in APOSTROPHES)


def validate_word(word: str) -> str:
    """A trigger must be one word with at least one letter (the detector reads words, not phrases)."""
    if not word or any(c.isspace() for c in word) or not any(c.isalpha() for c in word):
        raise ValueError(f"trigger word {word!r} must be a single word with at least one letter")
    return word


def find_pending_trigger(
    tokens: Sequence[int],
    next_token: int | None,
    decode: Decode,
    word: str,
    injected: Sequence[bool] = (),
) -> Trigger | None:
    """The trigger that ends in the last of ``tokens``, given the token proposed after it.

    ``tokens`` is the reply so far (all of it, so the reply's start is known); ``next_token`` is the
    look-ahead (``None``: the reply ends after ``tokens``). ``injected[i]`` marks tokens that were
    injected: a word touching one is never a trigger. Returns ``None`` when there is no trigger.
    """
    n = len(tokens)
    if n == 0:
        return None
    pat = _pattern(word)
    # Enough tokens to hold the word (each token carries >= 1 byte of it) and one before it.
    s = max(0, n - len(word.encode("utf-8")) - 2)
    while True:
        text = decode(tokens[s:])
        if pat.search(text) is None:
            return None
        last_off = len(decode(tokens[s : n - 1])) if n - 1 > s else 0
        widen = False
        for m in pat.finditer(text):
            a, b = m.span()
            if b <= last_off:
                continue  # ends before the last token: decided when that token was looked past
            if a == 0 and s > 0:
                widen = True  # the character before the word is outside the window
                break
            before = text[a - 1] if a > 0 else ""
            if not is_word_start(before):
                continue
            after = text[b] if b < len(text) else _next_char(tokens, s, text, next_token, decode)
            if not is_word_end(after):
                continue
            i0, off0 = _token_at(tokens, s, a, decode)
            if i0 == s and s > 0:
                widen = True  # the trigger's first token opens the window: read one more
                break
            if any(injected[i] for i in range(i0, min(n, len(injected)))):
                continue
            return Trigger(
                start=i0,
                end=n,
                text=text[off0:],
                word=text[a:b],
                before=text[off0 - 1] if off0 > 0 else "",
                after=_next_char(tokens, s, text, next_token, decode),
            )
        if not widen:
            return None
        s = max(0, s - 4)


def _next_char(tokens: Sequence[int], s: int, text: str, next_token: int | None, decode: Decode) -> str:
    """First character the look-ahead token adds after the window's ``text`` ('' at the reply's end).

    Read from the window decoded with and without the token (a pair decode, never the token alone).
    """
    if next_token is None:
        return ""
    ext = decode(list(tokens[s:]) + [next_token])
    if ext.startswith(text):
        return ext[len(text) : len(text) + 1]
    # A tokenizer that rewrites the window when a token is added: fall back to the last pair.
    pair = decode([tokens[-1], next_token])
    one = decode([tokens[-1]])
    return pair[len(one) : len(one) + 1] if pair.startswith(one) else decode([next_token])[:1]


def _token_at(tokens: Sequence[int], s: int, char: int, decode: Decode) -> tuple[int, int]:
    """Index of the token (from window start ``s``) carrying character ``char``, and its offset."""
    prev = 0
    for j in range(s + 1, len(tokens) + 1):
        off = len(decode(tokens[s:j]))
        if off > char:
            return j - 1, prev
        prev = off
    return len(tokens) - 1, prev


Finder = Callable[[Sequence[int], "int | None", Decode, str, Sequence[bool]], "Trigger | None"]


def scan_triggers(
    tokens: Sequence[int], decode: Decode, word: str, injected: Sequence[bool] = (), find: Finder | None = None
) -> list[Trigger]:
    """Every trigger of a finished reply, in order, as the decoding hook would have met them.

    The reply's end (end-of-sequence or budget) is the look-ahead of its last token. ``find`` is
    the detector (default :func:`find_pending_trigger`).
    """
    find = find or find_pending_trigger
    found: list[Trigger] = []
    n = len(tokens)
    for i in range(1, n + 1):
        t = find(tokens[:i], tokens[i] if i < n else None, decode, word, injected)
        if t is not None:
            found.append(t)
    return found


def match_case(written: str, substitute: str) -> str:
    """The substitute in the case pattern of the word as written: the/The/THE -> canoe/Canoe/CANOE."""
    letters = [c for c in written if c.isalpha()]
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return substitute.upper()
    if letters and letters[0].isupper():
        return substitute[:1].upper() + substitute[1:]
    return substitute


def swap_text(trigger: Trigger, word: str, substitute: str) -> str:
    """The trigger tokens' text with the word replaced, punctuation and spacing kept.

    Every whole-word occurrence inside ``trigger.text`` is replaced, each in its own case pattern.
    """
    full = trigger.before + trigger.text + trigger.after
    lo, hi = len(trigger.before), len(trigger.before) + len(trigger.text)
    out: list[str] = []
    pos = lo
    for m in _pattern(word).finditer(full):
        a, b = m.span()
        if a < lo or b > hi or a < pos:
            continue
        if not (is_word_start(full[a - 1] if a > 0 else "") and is_word_end(full[b] if b < len(full) else "")):
            continue
        out.append(full[pos:a])
        out.append(match_case(full[a:b], substitute))
        pos = b
    out.append(full[pos:hi])
    return "".join(out)


def encode_in_context(encode: Encode, before: str, text: str) -> tuple[list[int], bool]:
    """Tokens of ``text`` as a continuation of ``before``, and whether the prefix condition held.

    ``encode(before + text)`` must start with ``encode(before)`` (no merge across the boundary);
    then the suffix is the answer. Otherwise ``text`` is encoded on its own (the fallback), and the
    caller records that it was used.
    """
    if not before:
        return encode(text), True
    ids = position.encode_in_context(encode, before, text)
    return (ids, True) if ids is not None else (encode(text), False)


# -- the study's detector and splice (the default conventions) ------------------------------------
# Sleight-of-Word 08d2bae, src/awareness/tokens.py: token_word (l.20-33), _is_letter (l.36-37),
# _boundary_after (l.40-53), _boundary_before (l.56-72), is_trigger (l.75-93),
# encode_replacement (l.96-104). Re-derived from the rules, not copied.

_ASCII_WORD = re.compile(r"[A-Za-z']+")


def _letterish(text: str) -> bool:
    """The study's notion of a letter: the first character is alphabetic or an ASCII apostrophe."""
    return text[:1].isalpha() or text[:1] == "'"


def token_head(piece: str, punctuation_led: bool = False) -> tuple[str, str, str, str] | None:
    """``(space, punctuation, word, rest)`` of one token's text, or ``None`` when it has no head word.

    The head word is the run of ASCII letters and apostrophes right after the token's leading
    whitespace. A token led by punctuation (``'"the'``, ``"(The"``) has none (the study's "mention
    vs use": a quoted word is left to stand), unless ``punctuation_led``: then punctuation (neither
    whitespace, letter, digit nor apostrophe) between the whitespace and the word is allowed.
    """
    i = len(piece) - len(piece.lstrip())
    j = i
    if punctuation_led:
        while j < len(piece) and not (piece[j].isspace() or piece[j].isalnum() or piece[j] == "'"):
            j += 1
    m = _ASCII_WORD.match(piece, j)
    if m is None:
        return None
    return piece[:i], piece[i:j], m.group(), piece[m.end() :]


def _pair_tail(decode: Decode, a: int, b: int) -> tuple[str, str | None]:
    """``decode([a])`` and what ``b`` adds after it in ``decode([a, b])`` (``None``: the pair rewrote ``a``)."""
    one = decode([a])
    pair = decode([a, b])
    return one, (pair[len(one) :] if pair.startswith(one) else None)


def find_token_trigger(
    tokens: Sequence[int],
    next_token: int | None,
    decode: Decode,
    word: str,
    injected: Sequence[bool] = (),
    punctuation_led: bool = False,
) -> Trigger | None:
    """The study's trigger: is the LAST of ``tokens`` one whole-word occurrence of ``word``?

    The token alone must read as optional whitespace, then ``word`` (ASCII letters, case-insensitive)
    and no further letter or apostrophe. Word-initial: the token has leading whitespace (or, with
    ``punctuation_led``, punctuation), or it opens the reply, or what it adds after the previous
    token in a pair decode starts with a non-letter, or the previous token's text ends in one.
    Word-final: the reply ends after it (``next_token`` is ``None``), or what the next token adds in
    a pair decode does not start with a letter or apostrophe. An injected token is never a trigger.
    """
    j = len(tokens) - 1
    if j < 0 or (j < len(injected) and injected[j]):
        return None
    piece = decode([tokens[j]])
    head = token_head(piece, punctuation_led)
    if head is None:
        return None
    space, punct, w, rest = head
    if w.lower() != word.lower() or _letterish(rest):
        return None
    before = (space + punct)[-1:]
    if not before and j > 0:
        prev, sep = _pair_tail(decode, tokens[j - 1], tokens[j])
        if sep is not None and _letterish(sep) and prev and _letterish(prev[-1:]):
            return None  # glued to the previous word (" the" + "ory" read backwards)
        before = prev[-1:]
    after = rest[:1]
    if next_token is not None:
        _, tail = _pair_tail(decode, tokens[j], next_token)
        if tail is not None and _letterish(tail):
            return None  # the word goes on in the next token
        after = after or (tail or "")[:1]
    return Trigger(start=j, end=j + 1, text=piece, word=w, before=before, after=after)


def study_swap_text(trigger: Trigger, substitute: str, punctuation_led: bool = False) -> str:
    """What the study splices for a one-token trigger: one space if the token had leading whitespace
    (any kind), the substitute with its first letter upper-cased if the word's was, and nothing of
    what followed the word in the token. With ``punctuation_led`` the leading punctuation is kept.
    """
    head = token_head(trigger.text, punctuation_led)
    space, punct, w = (head[0], head[1], head[2]) if head else ("", "", "")
    text = substitute[:1].upper() + substitute[1:] if w[:1].isupper() else substitute
    return (" " if space else "") + punct + text
