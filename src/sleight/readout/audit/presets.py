"""Built-in presets: the studies' prompts, built as :class:`AuditItem` s from data records.

* ``forecast`` -- the reader-forecast prompt: a note, a quoted multiple-choice item, and the question
  "Out of 100 such readers, how many answer correctly?" over the grid 10/30/50/70/90;
* ``ptrue`` -- lm-polygraph's P(True) prompt over question/answer pairs (see :mod:`.ptrue`);
* ``grade`` -- a G-Eval-style 1-5 consistency rating of a summary.

Records come in the fixture formats (``race_items.jsonl``, ``qa_items.jsonl``, ``grade_items.jsonl``
in ``sleight/data/fixtures``) or from the loaders in :mod:`.sources`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any, TypedDict

from sleight.errors import UserError
from sleight.readout.audit.items import AuditItem
from sleight.readout.ptrue.readouts import PTRUE_INSTRUCTION, PTRUE_LABELS_BLOCK, ptrue_prompt

LETTERS = ("A", "B", "C", "D")

# --- forecast ------------------------------------------------------------------------------------
FORECAST_OPTIONS: tuple[str, ...] = ("10", "30", "50", "70", "90")
FORECAST_STEM = "Out of 100 such readers, about "
FORECAST_LEAD = "A future reader will be shown ONLY the note above, not the source text, and will then be asked:"
FORECAST_ITEM_INSTRUCTION = "Answer with exactly one of: A, B, C, D."
FORECAST_QUESTION = "Out of 100 such readers, how many answer correctly? Reply with exactly one of: 10, 30, 50, 70, 90."
NOTE_MODES = ("mixed", "constructed", "unrelated", "both")

# --- grade ---------------------------------------------------------------------------------------
GRADE_OPTIONS: tuple[str, ...] = ("1", "2", "3", "4", "5")
GRADE_TEMPLATE = (
    "You will be shown a news article and a summary of it. Rate the summary on one metric.\n\n"
    "Evaluation criterion:\n"
    "Consistency (1-5): is every fact in the summary supported by the article? A consistent summary "
    "states nothing that the article does not say. Penalise summaries that contain invented or "
    "contradicted facts.\n\n"
    "Evaluation steps:\n"
    "1. Read the article and note its main facts.\n"
    "2. Read the summary and check each of its claims against the article.\n"
    "3. Give a consistency score from 1 (many unsupported claims) to 5 (fully supported).\n\n"
    "{quoted}\n\n"
    "Evaluation form (score ONLY):\n"
    "- Consistency:"
)

_ABBREV = re.compile(r"\b(?:Mr|Mrs|Ms|Dr|St|Prof|Sr|Jr|vs|etc|e\.g|i\.e|a\.m|p\.m|U\.S)\.$")


def split_sentences(text: str) -> list[str]:
    """Sentences of a passage: split after . ! ? followed by a space and a capital or digit,
    except after common abbreviations (``Ms.``, ``a.m.``)."""
    parts: list[str] = []
    start = 0
    for m in re.finditer(r"[.!?][\"')\]]*\s+(?=[A-Z0-9\"'])", text):
        chunk = text[start : m.start() + 1]
        if _ABBREV.search(chunk.rstrip("\"')]")):
            continue
        parts.append(text[start : m.end()].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def constructed_note(record: Mapping[str, Any]) -> str:
    """The passage's first two sentences plus "The correct answer is X: <choice>."."""
    letter = record["answer"]
    choice = record["choices"][LETTERS.index(letter)].rstrip(".")
    lead = " ".join(split_sentences(record.get("passage") or "")[:2])
    return f"{lead} The correct answer is {letter}: {choice}.".strip()


def unrelated_note(other: Mapping[str, Any]) -> str:
    """The first two sentences of a different passage (nothing about this item)."""
    lead = " ".join(split_sentences(other.get("passage") or "")[:2])
    return lead or "The weather was mild and nothing else happened that day."


CHOICE_LABEL = "{letter}: {text}"  # Appendix H prints the choices "A: ...", not "A. ..." (issue #19 item 3)


def choices_block(choices: Sequence[str]) -> str:
    """The quoted item's lettered choices as the reader-forecast prompts print them (Appendix H)."""
    return "\n".join(CHOICE_LABEL.format(letter=letter, text=text) for letter, text in zip(LETTERS, choices))


def forecast_prompt(note: str, question: str, choices: Sequence[str]) -> tuple[str, str, str]:
    """The reader-forecast prompt; returns (prompt, quoted item, choices block)."""
    block = choices_block(choices)
    quoted = f"{question}\n{block}\n{FORECAST_ITEM_INSTRUCTION}"
    prompt = f"Note: {note}\n\n{FORECAST_LEAD}\n\n{quoted}\n\n{FORECAST_QUESTION}"
    return prompt, quoted, block


def _check_race(rec: Mapping[str, Any], k: int) -> None:
    for key in ("id", "question", "choices", "answer"):
        if key not in rec:
            raise UserError(f"forecast record {k + 1}: missing '{key}' (needs id, passage, question, choices[4], answer)")
    if not isinstance(rec["choices"], list) or len(rec["choices"]) != 4:
        raise UserError(f"forecast record '{rec['id']}': 'choices' must be a list of 4 strings")
    if rec["answer"] not in LETTERS:
        raise UserError(f"forecast record '{rec['id']}': 'answer' must be one of A, B, C, D")


def forecast_items(records: Sequence[Mapping[str, Any]], note: str = "mixed") -> list[AuditItem]:
    """Reader-forecast items from RACE-style records.

    ``note``: ``constructed`` (target 1: the note states the answer), ``unrelated`` (target 0: the
    note is another passage's opening), ``mixed`` (alternating, starting with constructed) or
    ``both`` (each record twice, ids suffixed ``:constructed`` / ``:unrelated``).
    """
    if note not in NOTE_MODES:
        raise UserError(f"unknown note mode '{note}' (choose from {', '.join(NOTE_MODES)})")
    for k, rec in enumerate(records):
        _check_race(rec, k)
    items: list[AuditItem] = []
    n = len(records)
    for k, rec in enumerate(records):
        kinds = {
            "constructed": ["constructed"],
            "unrelated": ["unrelated"],
            "mixed": ["constructed" if k % 2 == 0 else "unrelated"],
            "both": ["constructed", "unrelated"],
        }[note]
        for kind in kinds:
            text = constructed_note(rec) if kind == "constructed" else unrelated_note(records[(k + 1) % n] if n > 1 else {})
            prompt, quoted, block = forecast_prompt(text, rec["question"], rec["choices"])
            items.append(
                AuditItem(
                    id=f"{rec['id']}:{kind}" if note == "both" else str(rec["id"]),
                    messages=({"role": "user", "content": prompt},),
                    options=FORECAST_OPTIONS,
                    quoted_instruction=FORECAST_ITEM_INSTRUCTION,
                    choices_block=block,
                    quoted=quoted,
                    choices=tuple(rec["choices"]),
                    question=rec["question"],
                    letters=LETTERS,
                    target=1.0 if kind == "constructed" else 0.0,
                    stem=FORECAST_STEM,
                    meta={"note_kind": kind, "gold": rec["answer"], "note": text},
                )
            )
    return items


def select_ids(records: Sequence[Mapping[str, Any]], ids: Sequence[str]) -> list[Mapping[str, Any]]:
    """The records named by ``ids``, in that order (Figure 1 names its item, high6240.txt, rather than
    a position in A.1's list). A record matches by its ``id`` or, for RACE, its ``example_id``
    (``high6240.txt``: the passage file, one question per passage in A.1's list); a name that matches
    none, or several, is one line."""
    out = []
    for name in ids:
        hits = [r for r in records if name in (str(r.get("id")), str(r.get("example_id")))]
        if len(hits) != 1:
            why = "no record" if not hits else f"{len(hits)} records"
            raise UserError(f"item '{name}': {why} of the {len(records)} read has that id")
        out.append(hits[0])
    return out


# --- ptrue ---------------------------------------------------------------------------------------
def ptrue_items(records: Sequence[Mapping[str, Any]], *, instruct: bool = True) -> list[AuditItem]:
    """P(True) items from QA records: each question with its accepted answer (target 1) and, when
    the record has one, its wrong answer (target 0). Options are ``True``/``False`` as the library
    reads them; the quoted instruction is the True/False question block (deleted by the
    ``deleted_instruction`` variant, an intervention of the audit). ``instruct=False``: the raw
    prompt string is the context (lm-polygraph's non-instruct models), no chat template.

    A record's ``instruction`` (the quoted item's own instruction: MMLU's letter instruction,
    TriviaQA's "answer briefly" line) is read as ``readout ptrue`` reads it
    (:attr:`sleight.readout.ptrue.answers.QAItem.prompt_without_instruction`): ``meta`` carries it
    and ``deleted_question``, the question with it deleted, which the paper's Deleted readout quotes
    (None where the record has none or its question does not contain it)."""
    from sleight.readout.items import QAItem

    items: list[AuditItem] = []
    for k, rec in enumerate(records):
        if "id" not in rec or "question" not in rec or not rec.get("answers"):
            raise UserError(f"ptrue record {k + 1}: needs id, question and a non-empty answers list")
        instruction = rec.get("instruction")
        if instruction is not None and (not isinstance(instruction, str) or not instruction.strip()):
            raise UserError(f"ptrue record {k + 1}: 'instruction' must be a non-empty string")
        deleted = QAItem(str(rec["id"]), rec["question"], aliases=tuple(rec["answers"]), instruction=instruction).prompt_without_instruction
        pairs = [("true", rec["answers"][0], 1.0)]
        if rec.get("wrong"):
            pairs.append(("false", rec["wrong"], 0.0))
        for tag, answer, target in pairs:
            prompt = ptrue_prompt(rec["question"], answer)
            items.append(
                AuditItem(
                    id=f"{rec['id']}:{tag}",
                    messages=({"role": "user", "content": prompt},),
                    options=("True", "False"),
                    quoted_instruction=PTRUE_INSTRUCTION,
                    choices_block=PTRUE_LABELS_BLOCK,
                    quoted=None,
                    question=rec["question"],
                    letters=("A", "B"),
                    target=target,
                    chat_template=instruct,
                    meta={"question_text": rec["question"], "answer": answer, "instruction": instruction, "deleted_question": deleted},
                )
            )
    return items


# --- grade ---------------------------------------------------------------------------------------
def grade_items(records: Sequence[Mapping[str, Any]]) -> list[AuditItem]:
    """G-Eval-style consistency ratings; ``target`` is the human score (1-5) and the score is the
    expected grade (``score_scale`` 1, so ``sum(int(o) * p_o)``)."""
    items: list[AuditItem] = []
    for k, rec in enumerate(records):
        for key in ("id", "source", "summary"):
            if key not in rec:
                raise UserError(f"grade record {k + 1}: missing '{key}' (needs id, source, summary[, human_score])")
        quoted = f"Article:\n{rec['source']}\n\nSummary:\n{rec['summary']}"
        items.append(
            AuditItem(
                id=str(rec["id"]),
                messages=({"role": "user", "content": GRADE_TEMPLATE.format(quoted=quoted)},),
                options=GRADE_OPTIONS,
                quoted=quoted,
                target=float(rec["human_score"]) if rec.get("human_score") is not None else None,
                score_scale=1.0,
                letters=(),
            )
        )
    return items


# --- registry ------------------------------------------------------------------------------------
PRESET_FIXTURES = {"forecast": "race_items.jsonl", "ptrue": "qa_items.jsonl", "grade": "grade_items.jsonl"}
PRESETS: dict[str, Callable[..., list[AuditItem]]] = {"forecast": forecast_items, "ptrue": ptrue_items, "grade": grade_items}


def load_fixture(name: str) -> list[dict[str, object]]:
    """A shipped fixture file (``race_items.jsonl`` ...) as a list of records (the preset checks their fields)."""
    path = resources.files("sleight").joinpath("data").joinpath("fixtures").joinpath(name)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def preset_items(
    name: str, records: Sequence[Mapping[str, Any]] | None = None, *, note: str = "mixed", limit: int | None = None, instruct: bool = True
) -> list[AuditItem]:
    """Items for preset ``name`` from ``records`` (default: the shipped fixture); ``instruct`` is the
    ptrue preset's rendering (False: the raw prompt, no chat template)."""
    if name not in PRESETS:
        raise UserError(f"unknown preset '{name}' (choose from {', '.join(PRESETS)})")
    recs = list(records) if records is not None else load_fixture(PRESET_FIXTURES[name])
    if limit is not None:
        recs = recs[:limit]
    if not recs:
        raise UserError(f"preset '{name}': no records")
    if name == "forecast":
        return forecast_items(recs, note=note)
    if name == "ptrue":
        return ptrue_items(recs, instruct=instruct)
    return PRESETS[name](recs)


class PresetDefaults(TypedDict):
    """What a preset implies for the run: its options and the stem they are read after."""

    options: tuple[str, ...]
    stem: str | None


def preset_defaults(name: str) -> PresetDefaults:
    """Run-level defaults a preset implies (options, stem)."""
    defaults: dict[str, PresetDefaults] = {
        "forecast": {"options": FORECAST_OPTIONS, "stem": FORECAST_STEM},
        "ptrue": {"options": ("True", "False"), "stem": None},
        "grade": {"options": GRADE_OPTIONS, "stem": None},
    }
    return defaults[name]
