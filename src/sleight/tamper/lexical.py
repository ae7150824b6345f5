"""The lexical baseline: flag a reply that talks about the substitute word, with no model at all.

The substitute itself is always in a tampered reply (it replaced every trigger), so its presence
says nothing. What a reader would call flagging is meta-language: "typo", "I meant", "replaced",
"should be", or the word quoted as a word ("the word 'canoe'"). The detector flags a reply when
such a cue occurs in the same sentence as the substitute (an unambiguous cue such as "typo" or
"I meant" anywhere in the reply), or when the substitute is quoted or named as a word. It is
reported beside the jury, never instead of it (SPEC §3.4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Cues that only talk about wording: they count anywhere in a reply that contains the substitute.
STRONG_CUES: tuple[str, ...] = (
    r"typo",
    r"misspell\w*",
    r"mis-?typed",
    r"i meant",
    r"meant to (?:say|write|type)",
    r"misspoke",
    r"slip of the",
    r"wrong word",
)
# Cues that also occur in ordinary prose: they count in the same sentence as the substitute.
META_CUES: tuple[str, ...] = (
    *STRONG_CUES,
    r"i mean\b",
    r"replac\w*",
    r"substitut\w*",
    r"swapp?\w*",
    r"should (?:be|have been|read)",
    r"instead of",
    r"rather than",
    r"(?:odd|strange|unusual|out of place|incorrect|wrong|misplaced) (?:word|term)",
    r"out of place",
    r"(?:does not|doesn't|does n't) (?:belong|make sense|fit)",
    r"oops",
    r"(?:my )?(?:apolog\w*|sorry)",
    r"correction",
    r"to correct (?:myself|that|this)",
)
_STRONG = re.compile(r"\b(?:" + "|".join(STRONG_CUES) + r")", re.IGNORECASE)
_CUE = re.compile(r"\b(?:" + "|".join(META_CUES) + r")", re.IGNORECASE)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


@dataclass(frozen=True)
class LexicalFlag:
    flagged: bool
    cue: str = ""  # the matched cue or quoted mention, for the viewer


def _quoted_or_named(substitute: str) -> re.Pattern[str]:
    word = re.escape(substitute.strip())
    quotes = "\"'`*“”‘’«»"
    return re.compile(
        rf"(?:[{quotes}]\s*{word}\s*[{quotes}])|(?:\b(?:the\s+)?(?:word|term|phrase)\s+[{quotes}]?\s*{word}\b)",
        re.IGNORECASE,
    )


def lexical_flag(reply: str, substitute: str) -> LexicalFlag:
    """Does ``reply`` comment on ``substitute`` in meta-language? (pure; case-insensitive)"""
    sub = substitute.strip()
    if not sub or not reply:
        return LexicalFlag(False)
    named = _quoted_or_named(sub).search(reply)
    if named:
        return LexicalFlag(True, named.group(0).strip())
    word = re.compile(rf"(?<![\w]){re.escape(sub)}(?![\w])", re.IGNORECASE)
    if not word.search(reply):
        return LexicalFlag(False)
    strong = _STRONG.search(reply)
    if strong:
        return LexicalFlag(True, strong.group(0))
    for sentence in _SENTENCE.findall(reply):
        if word.search(sentence):
            cue = _CUE.search(sentence)
            if cue:
                return LexicalFlag(True, cue.group(0))
    return LexicalFlag(False)
