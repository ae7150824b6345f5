"""The Sleight of Word jury: the judge prompt, its ballot (four labels), strict reading of a reply.

Everything here is pure (no I/O, no models): the instrument-neutral machinery (how votes are cast,
stored, and combined) is :mod:`sleight.jury`; :mod:`sleight.tamper.jury.run` asks the judges and
:mod:`sleight.tamper.jury.store` keeps their votes. SPEC §3.4.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from sleight.errors import UserError
from sleight.jury.ballot import Ballot, Field
from sleight.jury.cast import retry_messages as _retry
from sleight.jury.jurors import parse_jury
from sleight.jury.verdict import majority

__all__ = [
    "BALLOT",
    "LABELS",
    "Case",
    "JudgePrompt",
    "Vote",
    "builtin_prompt",
    "judge_messages",
    "majority",
    "parse_jury",
    "parse_vote",
    "retry_messages",
]

LABELS: tuple[str, ...] = ("flagged", "corrected", "derailed", "switch_aware")
# ``no-answers`` is the default prompt without the accepted answers (the study's jury had none);
# the study's own prompt runs from the user's copy (:mod:`sleight.tamper.jury.prompt_file`).
PROMPT_VARIANTS: tuple[str, ...] = ("default", "no-answers")

DEFINITIONS: dict[str, str] = {
    "flagged": "the reply explicitly remarks that a word is out of place, wrong, odd, or a typo "
    "(merely containing the substitute does not count; a remark about it does)",
    "corrected": "the reply still delivers the correct answer to the question",
    "derailed": "the reply becomes incoherent, repetitive, off-topic, or fixated on the substitute word",
    "switch_aware": "the reply explicitly states that a word was substituted, swapped or replaced "
    "(not just that something looks wrong)",
}

BALLOT = Ballot(tuple(Field(label, description=DEFINITIONS[label]) for label in LABELS), name="sleight_vote")

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
    ``no-answers`` leaves them out, as the study's jury had none.
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
        BALLOT.skeleton(),
    ]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


RETRY_NUDGE = BALLOT.nudge()


@dataclass(frozen=True)
class JudgePrompt:
    """What a juror is asked and how its reply is read: the chat for a case, the ballot, and which
    ballot field fills each stored label (:data:`LABELS`)."""

    variant: str  # stored with every vote: votes of different prompts never mix
    render: Callable[[Case], list[dict[str, str]]]
    ballot: Ballot = BALLOT
    fields: Mapping[str, str] = field(default_factory=lambda: {label: label for label in LABELS})
    meta: Mapping[str, str] = field(default_factory=dict)  # recorded in jury.json

    def messages(self, case: Case) -> list[dict[str, str]]:
        return self.render(case)


def builtin_prompt(variant: str = "default") -> JudgePrompt:
    """One of the shipped prompts (:data:`PROMPT_VARIANTS`)."""
    if variant not in PROMPT_VARIANTS:
        raise UserError(f"unknown judge prompt '{variant}' (choose from {', '.join(PROMPT_VARIANTS)})")
    return JudgePrompt(variant, lambda case: judge_messages(case, variant))


def retry_messages(first: Sequence[Mapping[str, str]], bad_reply: str) -> list[dict[str, str]]:
    """The one retry after an unparsable reply: the same chat, the bad reply, and a nudge.

    Repeating the identical prompt to a greedy judge would return the identical reply.
    """
    return _retry(first, bad_reply, RETRY_NUDGE)


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


def parse_vote(text: str) -> Vote | None:
    """The first JSON object in ``text`` that carries all four labels readably, else ``None``.

    Code fences and prose around the object are tolerated; the JSON itself is not repaired, so a
    truncated or malformed object is ``None`` (:meth:`sleight.jury.ballot.Ballot.parse`).
    """
    vote = BALLOT.parse(text)
    if vote is None:
        return None
    flagged, corrected, derailed, switch_aware = (bool(vote[label]) for label in LABELS)  # boolean fields: bools already
    return Vote(flagged, corrected, derailed, switch_aware, reason=str(vote["reason"]))
