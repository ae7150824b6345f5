"""The data layer's records: what each family's loader builds from the hub's rows, and what each use
(:meth:`~sleight.readout.data.common.DataSet.view`) hands a readout command.

Each is the JSON object the commands read (and digest) as it is, its keys in the order the loaders
write them; the commands' own parsers (:func:`sleight.readout.items.qa_item_from_record`, the audit's
presets and items) check them as they check a user's file.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

# ------------------------------------------------------------------------------------------------
# each family's records
# ------------------------------------------------------------------------------------------------


class RaceRecord(TypedDict):
    """One RACE question (one hub row): ``<example_id>:<k>``, with the split and row it was read from."""

    id: str
    passage: str
    question: str
    choices: list[str]
    answer: str  # the gold letter
    example_id: str
    split: str
    source_index: int


class SampledRaceRecord(RaceRecord):
    """A question of A.1's sample, with its passage's first ``example_id`` and the passage's MD5."""

    passage_id: str
    passage_md5: str


class MmluRecord(TypedDict):
    """An MMLU item as lm-polygraph builds it: ``input`` the text the model answers, ``instruction``
    its description line."""

    id: str
    input: str
    question: str
    choices: list[str]
    answer: str  # the gold letter
    subject: NotRequired[str]  # rebuilt from cais/mmlu (LM-Polygraph/mmlu's rows do not name it)
    instruction: str
    source_index: int


class TriviaQARecord(TypedDict):
    """A TriviaQA item as lm-polygraph builds it: ``answers`` the value then its aliases, ``wrong``
    the next item's first answer (None where that is one of this item's)."""

    id: str
    question: str
    raw_question: str
    answers: list[str]
    aliases: list[str]
    instruction: str | None  # the "answer briefly" line (simple_instruct only)
    source_index: int
    wrong: str | None


class MmluProRecord(TypedDict):
    """An MMLU-Pro item: 2-10 lettered choices, the quoted prompt (``input``) and its instruction line."""

    id: str
    question: str
    choices: list[str]
    answer: str  # the gold letter
    category: str
    input: str
    instruction: str
    source_index: int


class SummEvalRecord(TypedDict):
    """One (article, machine summary) of SummEval with the four expert grades; ``human_score`` the
    grade of ``dimension``."""

    id: str
    source: str
    summary: str
    coherence: float
    consistency: float
    fluency: float
    relevance: float
    human_score: float
    dimension: str
    source_index: int


# ------------------------------------------------------------------------------------------------
# each use's records (besides a family's own: forecast and qa from RACE-H, grade from SummEval)
# ------------------------------------------------------------------------------------------------


class LetteredQuestion(TypedDict):
    """A lettered question as ``readout ptrue``/``estimators`` read it (MMLU's ``qa``)."""

    id: str
    question: str
    choices: list[str]
    answer: str
    input: str
    instruction: str


class PtruePair(TypedDict):
    """A P(True) preset record: the question quoted, its accepted answers, the wrong one where there
    is one, and the quoted item's instruction where it has one."""

    id: str
    question: str
    answers: list[str]
    wrong: NotRequired[str | None]  # None: hf:triviaqa's one question, with no next answer to take
    instruction: NotRequired[str]


class McqRecord(TypedDict):
    """An audit item in the ``--items`` record format (the ``mcq`` use): the prompt, the letters as
    options, the quoted instruction and its lettered choices."""

    id: str
    prompt: str
    options: list[str]
    letters: list[str]
    choices: list[str]
    question: str
    quoted_instruction: str
    choices_block: str
    gold: str


UseRecord = SampledRaceRecord | LetteredQuestion | PtruePair | McqRecord | SummEvalRecord
"""What a view gives: a record of one use's format."""
