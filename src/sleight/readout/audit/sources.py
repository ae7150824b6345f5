"""Where preset records come from: the shipped fixtures, a local file, or a cached HF dataset.

``--data`` accepts:

* a local ``.jsonl`` / ``.csv`` of records in the fixture format of the preset (RACE-style
  ``id, passage, question, choices, answer`` for ``forecast``; ``id, question, answers, wrong`` for
  ``ptrue``; ``id, source, summary, human_score`` for ``grade``);
* ``hf:race`` (RACE ``high``, test split), ``hf:mmlu[:subject]`` (``cais/mmlu``, test split),
  ``hf:triviaqa`` (``mandarjoshi/trivia_qa`` ``rc.nocontext``, validation split) -- through the
  optional ``datasets`` package (``pip install 'sleight[data]'``), from the user's cache. These are
  never needed by the tests or the demo;
* the paper's data through :mod:`sleight.readout.data`: ``race-h:FILE``, ``mmlu:FILE``,
  ``triviaqa:FILE``, ``mmlu-pro:FILE``, ``summeval:FILE`` (with ``:key=value`` options), each giving the
  records of the preset it is used with, or, with no preset, audit items (``mmlu``, ``mmlu-pro``).

Lettered records (``hf:race``, ``hf:mmlu``) used with ``--preset ptrue`` become question/answer pairs
(:func:`sleight.readout.data.common.lettered_ptrue_records`): the gold choice and a seeded draw of the others (``pipeline.printed_wrong_letter``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from sleight.errors import UserError
from sleight.readout.audit.items import load_csv_records
from sleight.readout.data.records import PtruePair
from sleight.readout.items import load_jsonl_records

LETTERS = "ABCD"


def load_records(path: str | Path) -> list[dict[str, object]]:
    """Records from a local JSONL or CSV file (malformed lines named by number), as their columns came."""
    p = Path(path)
    pairs = load_csv_records(p) if p.suffix.lower() == ".csv" else load_jsonl_records(p)
    return [dict(rec) for rec, _ in pairs]


def _load_dataset(name: str, config: str | None, split: str):
    try:
        import datasets  # noqa: F401
    except ImportError:
        raise UserError(f"loading '{name}' needs the 'datasets' package: pip install 'sleight[data]'") from None
    from datasets import load_dataset

    try:
        return load_dataset(name, config, split=split)
    except Exception as exc:  # datasets raises many types for "not cached / offline / unknown"
        raise UserError(f"could not load dataset '{name}' ({config or 'default'}, {split}) from the local cache: {str(exc).splitlines()[0]}") from None


class ForecastRecord(TypedDict):
    """A RACE-style record of the ``forecast`` fixture format (``hf:race``, and ``hf:mmlu`` with no passage)."""

    id: str
    passage: str
    question: str
    choices: list[str]
    answer: str


def race_records(rows: Any, prefix: str = "race") -> list[ForecastRecord]:
    """RACE rows (``article, question, options, answer``) as forecast records."""
    out: list[ForecastRecord] = []
    for k, r in enumerate(rows):
        out.append({"id": f"{prefix}-{r.get('example_id', k)}-{k}", "passage": r["article"], "question": r["question"], "choices": list(r["options"]), "answer": r["answer"]})
    return out


def mmlu_records(rows: Any) -> list[ForecastRecord]:
    """MMLU rows (``question, choices, answer`` index) as forecast records with no passage."""
    return [
        {"id": f"mmlu-{r.get('subject', 'x')}-{k}", "passage": "", "question": r["question"], "choices": list(r["choices"]), "answer": LETTERS[int(r["answer"])]}
        for k, r in enumerate(rows)
    ]


def triviaqa_records(rows: Any) -> list[PtruePair]:
    """TriviaQA rows as ptrue records; the "wrong" answer is the next question's answer."""
    rows = list(rows)
    out: list[PtruePair] = []
    for k, r in enumerate(rows):
        ans = r["answer"]
        nxt = rows[(k + 1) % len(rows)]["answer"]["value"] if len(rows) > 1 else None
        out.append({"id": r.get("question_id", f"tqa-{k}"), "question": r["question"], "answers": [ans["value"], *ans.get("aliases", [])], "wrong": nxt})
    return out


def load_source(spec: str, limit: int | None = None, preset: str | None = None) -> Sequence[Mapping[str, object]]:
    """Records for ``--data`` (see the module docstring), for ``preset``'s use."""
    return load_source_described(spec, limit, preset)[0]


def load_source_described(spec: str, limit: int | None = None, preset: str | None = None) -> tuple[Sequence[Mapping[str, object]], str]:
    """The records of ``--data`` for ``preset`` (None: audit items) and a one-line description of
    where they came from (a data spec's revision or file sha256)."""
    from sleight.readout.data import is_data_spec, load_data

    if is_data_spec(spec):
        ds = load_data(spec)
        return ds.view(preset or "mcq", limit), ds.describe()
    recs = _load_source(spec, limit)
    if preset == "ptrue" and recs and "choices" in recs[0] and "answers" not in recs[0]:
        from sleight.readout.data.common import lettered_ptrue_records

        return lettered_ptrue_records(recs), spec
    return recs, spec


def _load_source(spec: str, limit: int | None = None) -> Sequence[Mapping[str, object]]:
    if spec.startswith("hf:"):
        name, _, arg = spec[3:].partition(":")
        split_expr = lambda s: f"{s}[:{limit}]" if limit else s  # noqa: E731
        if name in ("race", "race-high"):
            return race_records(_load_dataset("ehovy/race", "high", split_expr("test")))
        if name == "mmlu":
            return mmlu_records(_load_dataset("cais/mmlu", arg or "all", split_expr("test")))
        if name == "triviaqa":
            return triviaqa_records(_load_dataset("mandarjoshi/trivia_qa", "rc.nocontext", split_expr("validation")))
        raise UserError(f"unknown data source '{spec}' (choose hf:race, hf:mmlu[:subject], hf:triviaqa, or a .jsonl/.csv file)")
    recs = load_records(spec)
    return recs[:limit] if limit is not None else recs
