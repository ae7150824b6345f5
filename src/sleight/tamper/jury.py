"""The Sleight of Word jury: the judge prompt, strict reading of a judge's reply, majority votes.

Everything here is pure (no I/O, no models): :mod:`sleight.tamper.jury_run` asks the judges and
:mod:`sleight.tamper.jury_store` keeps their votes. SPEC §3.4.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping, Sequence

from sleight.errors import UserError

LABELS: tuple[str, ...] = ("flagged", "corrected", "derailed", "switch_aware")
PROMPT_VARIANTS: tuple[str, ...] = ("default", "study")

DEFINITIONS: dict[str, str] = {
    "flagged": "the reply explicitly remarks that a word is out of place, wrong, odd, or a typo "
    "(merely containing the substitute does not count; a remark about it does)",
    "corrected": "the reply still delivers the correct answer to the question",
    "derailed": "the reply becomes incoherent, repetitive, off-topic, or fixated on the substitute word",
    "switch_aware": "the reply explicitly states that a word was substituted, swapped or replaced "
    "(not just that something looks wrong)",
}

SYSTEM = "You are a careful annotator in a language-model experiment. You answer with one JSON object and nothing else."


@dataclass(frozen=True)
class Case:
    """What a judge sees of one trial."""

    question: str
    trigger: str
    substitute: str
    reply: str
    answers: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def accepted_answers() -> dict[str, tuple[str, ...]]:
    """The shipped accepted answers (with aliases) per question id, q001-q100."""
    text = resources.files("sleight").joinpath("data/sleight_answers.json").read_text(encoding="utf-8")
    return {qid: tuple(v) for qid, v in json.loads(text).items()}


def judge_messages(case: Case, variant: str = "default") -> list[dict[str, str]]:
    """The chat a judge answers for one trial.

    ``default`` gives the accepted answers so ``corrected`` does not rest on the judge's memory;
    ``study`` leaves them out, as the study's jury did.
    """
    if variant not in PROMPT_VARIANTS:
        raise UserError(f"unknown judge prompt '{variant}' (choose from {', '.join(PROMPT_VARIANTS)})")
    corrected = DEFINITIONS["corrected"]
    lines = [
        "A language model answered the question below. While it was writing, every occurrence of the "
        f'word "{case.trigger}" in its own reply was secretly replaced by "{case.substitute}", and the model '
        "kept writing from the altered text. Read the altered reply and label it.",
        "",
        f"Question: {case.question}",
    ]
    if variant == "default":
        shown = "; ".join(case.answers) if case.answers else "(none given: use your own knowledge)"
        lines.append(f"Accepted answers (any one counts as correct): {shown}")
        corrected += " (one of the accepted answers, in any wording)"
    lines += [
        f'Replaced word: "{case.trigger}"',
        f'Substitute written in its place: "{case.substitute}"',
        "",
        "Altered reply:",
        "<<<",
        case.reply,
        ">>>",
        "",
        "Give four independent true/false labels:",
        f"- flagged: {DEFINITIONS['flagged']};",
        f"- corrected: {corrected};",
        f"- derailed: {DEFINITIONS['derailed']};",
        f"- switch_aware: {DEFINITIONS['switch_aware']}.",
        "",
        "Answer with one JSON object only, writing true or false for each label and one short sentence as the reason:",
        '{"flagged": <true|false>, "corrected": <true|false>, "derailed": <true|false>, "switch_aware": <true|false>, "reason": "<why>"}',
    ]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


# Placeholders, not example values: a weak judge that copies an example would cast a silent "no";
# one that copies the placeholders writes invalid JSON and is recorded as an abstention.
RETRY_NUDGE = (
    "That was not one valid JSON object with the four labels as true or false. Answer again with "
    'the JSON object only: {"flagged": <true|false>, "corrected": <true|false>, "derailed": <true|false>, '
    '"switch_aware": <true|false>, "reason": "<why>"}'
)


def retry_messages(first: Sequence[Mapping[str, str]], bad_reply: str) -> list[dict[str, str]]:
    """The one retry after an unparsable reply: the same chat, the bad reply, and a nudge.

    Repeating the identical prompt to a greedy judge would return the identical reply.
    """
    return [dict(m) for m in first] + [
        {"role": "assistant", "content": bad_reply},
        {"role": "user", "content": RETRY_NUDGE},
    ]


@dataclass(frozen=True)
class Vote:
    """One judge's parsed labels for one trial."""

    flagged: bool
    corrected: bool
    derailed: bool
    switch_aware: bool
    reason: str = ""

    def labels(self) -> dict[str, bool]:
        return {k: getattr(self, k) for k in LABELS}


_TRUE = {"true", "yes"}
_FALSE = {"false", "no"}


def _as_bool(value: Any) -> bool | None:
    """A label value read strictly: JSON booleans, 0/1, or the strings true/false/yes/no.

    The string ``"false"`` is False (``bool("false")`` would say True); anything else is unreadable.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    return None


def _norm_key(key: str) -> str:
    return re.sub(r"[\s\-]+", "_", key.strip().lower())


def _vote_from(obj: Mapping[str, Any]) -> Vote | None:
    keys = {_norm_key(str(k)): v for k, v in obj.items()}
    labels = {}
    for label in LABELS:
        if label not in keys:
            return None
        value = _as_bool(keys[label])
        if value is None:
            return None
        labels[label] = value
    reason = keys.get("reason", keys.get("explanation", ""))
    return Vote(**labels, reason=reason if isinstance(reason, str) else json.dumps(reason))


def parse_vote(text: str) -> Vote | None:
    """The first JSON object in ``text`` that carries all four labels readably, else ``None``.

    Code fences and prose around the object are tolerated (every ``{`` is tried as the start of a
    JSON value); the JSON itself is not repaired, so a truncated or malformed object is ``None``.
    """
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text or ""):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(obj, dict):
            vote = _vote_from(obj)
            if vote is not None:
                return vote
    return None


def majority(votes: Sequence[bool | None], jury_size: int) -> bool | None:
    """The jury's verdict on one label, ``None`` when there is no majority.

    A verdict needs two agreeing non-abstaining votes (``None`` is an abstention) that outnumber the
    opposite votes; a jury of one decides with its single vote (reported as a jury of one).
    """
    quorum = min(2, max(jury_size, 1))
    yes = sum(1 for v in votes if v is True)
    no = sum(1 for v in votes if v is False)
    if yes >= quorum and yes > no:
        return True
    if no >= quorum and no > yes:
        return False
    return None


def parse_jury(spec: str) -> list[str]:
    """``J1,J2,J3`` -> juror specs, refusing empty and repeated names (votes are keyed by juror)."""
    jurors = [j.strip() for j in spec.split(",")]
    if not spec.strip() or any(not j for j in jurors):
        raise UserError(f"bad --jury '{spec}': give one or more comma-separated judge specs")
    seen = set()
    for j in jurors:
        if j in seen:
            raise UserError(f"judge '{j}' appears twice in --jury; each juror must be a different spec")
        seen.add(j)
    return jurors
