"""The paper's data, one loader layer for every readout command (``--data SPEC``).

| family | what | rule |
|---|---|---|
| ``race-h`` | RACE ``high`` test (``ehovy/race``) | duplicates removed, passages >= 200 words, a seeded draw (:mod:`.race`) |
| ``mmlu`` | ``cais/mmlu`` as lm-polygraph 0.7.0 builds ``LM-Polygraph/mmlu`` | its prompt, 5-shot draw, 100 per subject, subsample and seed (:mod:`.mmlu`) |
| ``triviaqa`` | ``trivia_qa`` ``rc.nocontext`` as lm-polygraph builds ``LM-Polygraph/triviaqa`` | its prompt, 5-shot draw, subsample and seed (:mod:`.triviaqa`) |
| ``mmlu-pro`` | ``TIGER-Lab/MMLU-Pro`` test | up to 10 lettered options (:mod:`.mmlu_pro`) |
| ``summeval`` | ``mteb/summeval`` test | one record per (article, summary) with the expert grades (:mod:`.summeval`) |

A spec is ``FAMILY:WHERE[:key=value]...`` (:mod:`.common`); :func:`load_data` returns a
:class:`~.common.DataSet` whose :meth:`~.common.DataSet.view` gives each command its records:
``forecast`` (RACE-style records), ``qa`` (the P(True)/estimators question records), ``ptrue`` (the
audit preset's question/answer pairs), ``grade`` and ``mcq`` (audit items). ``hf:NAME`` and plain
``.jsonl``/``.csv`` files stay with :mod:`sleight.readout.audit.sources`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias, TypeVar

from sleight.errors import UserError
from sleight.readout.data.common import DataSet, Spec, parse_spec
from sleight.readout.data.records import MmluProRecord, MmluRecord, SampledRaceRecord, SummEvalRecord, TriviaQARecord
from sleight.readout.items import QAItem, RaceItem

__all__ = ["FAMILIES", "DataSet", "FamilyDataSet", "is_data_spec", "load_data", "load_questions", "qa_items", "race_items"]

FamilyDataSet: TypeAlias = (
    DataSet[SampledRaceRecord] | DataSet[MmluRecord] | DataSet[TriviaQARecord] | DataSet[MmluProRecord] | DataSet[SummEvalRecord]
)
"""What a load gives: one family's records (:mod:`.records`), provenance and views."""


# Each family's loader imports its module on first use (plain imports, which the architecture test reads).
def _race(spec: Spec) -> DataSet[SampledRaceRecord]:
    from sleight.readout.data import race

    return race.load(spec)


def _mmlu(spec: Spec) -> DataSet[MmluRecord]:
    from sleight.readout.data import mmlu

    return mmlu.load(spec)


def _triviaqa(spec: Spec) -> DataSet[TriviaQARecord]:
    from sleight.readout.data import triviaqa

    return triviaqa.load(spec)


def _mmlu_pro(spec: Spec) -> DataSet[MmluProRecord]:
    from sleight.readout.data import mmlu_pro

    return mmlu_pro.load(spec)


def _summeval(spec: Spec) -> DataSet[SummEvalRecord]:
    from sleight.readout.data import summeval

    return summeval.load(spec)


FAMILIES: dict[str, Callable[[Spec], FamilyDataSet]] = {"race-h": _race, "mmlu": _mmlu, "triviaqa": _triviaqa, "mmlu-pro": _mmlu_pro, "summeval": _summeval}


def is_data_spec(text: str | None) -> bool:
    """Whether ``text`` names one of this layer's families (``race-h:...``), not a file or ``hf:``."""
    return bool(text) and str(text).partition(":")[0] in FAMILIES and ":" in str(text)


def load_data(spec: str) -> FamilyDataSet:
    """The records and provenance of a ``--data`` spec (no model needed; a bad spec or file is one line)."""
    parsed = parse_spec(spec, tuple(FAMILIES))
    return FAMILIES[parsed.family](parsed)


Item = TypeVar("Item", QAItem, RaceItem)


def _unique(items: list[Item], spec: str, limit: int | None) -> list[Item]:
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}")
    seen: set[str] = set()
    for it in items:
        if it.id in seen:
            raise UserError(f"--data '{spec}': duplicate id '{it.id}'")
        seen.add(it.id)
    if not items:
        raise UserError(f"--data '{spec}': no items")
    return items[:limit] if limit is not None else items


def qa_items(spec: str, limit: int | None = None) -> tuple[FamilyDataSet, list[QAItem]]:
    """The questions of ``readout ptrue`` / ``readout estimators`` (:class:`~sleight.readout.ptrue.answers.QAItem`)."""
    from sleight.readout.items import qa_item_from_record

    ds = load_data(spec)
    recs = ds.view("qa", limit)
    return ds, _unique([qa_item_from_record(r, f"{ds.family} item {k + 1}") for k, r in enumerate(recs)], spec, limit)


def race_items(spec: str, limit: int | None = None) -> tuple[FamilyDataSet, list[RaceItem]]:
    """The items of ``readout forecast`` (:class:`~sleight.readout.forecast.pipeline.RaceItem`)."""
    from sleight.readout.items import race_item_from_record

    ds = load_data(spec)
    recs = ds.view("forecast", limit)
    return ds, _unique([race_item_from_record(r, f"{ds.family} item {k + 1}") for k, r in enumerate(recs)], spec, limit)


def load_questions(items: str | None, data: str | None, limit: int | None = None) -> list[QAItem]:
    """``--items FILE`` (default: the shipped ``qa_items.jsonl``) or ``--data SPEC``: the questions of
    ``readout estimators``."""
    if items and data:
        raise UserError("give one of --items FILE or --data SPEC")
    if data:
        return qa_items(data, limit)[1]
    from sleight.readout.items import DEFAULT_QA_ITEMS, load_qa_items

    return load_qa_items(items or DEFAULT_QA_ITEMS, limit=limit)
