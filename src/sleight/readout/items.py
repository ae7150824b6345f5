"""The readout's item types and their record parsers, at the bottom of ``sleight.readout``.

Every instrument and the data layer build items from records through these: P(True)'s questions
(:class:`QAItem`, free-answer or lettered), the reader-forecast's RACE-style items (:class:`RaceItem`),
the seeded printed non-gold letter of a lettered item, and the JSONL reading with ``file line N``
errors and unique ids that all item loaders share. Nothing here imports another part of
``sleight.readout`` (tests/test_architecture.py holds it), so the data layer and every instrument can
import it without a circle.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from sleight.errors import UserError

LETTERS: tuple[str, ...] = ("A", "B", "C", "D")
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"
DEFAULT_QA_ITEMS = FIXTURES / "qa_items.jsonl"  # 36 shipped questions
DEFAULT_RACE_ITEMS = FIXTURES / "race_items.jsonl"  # 28 shipped items
LETTERED_INSTRUCTION = "Answer with the letter of the correct option (A, B, C or D)."
PRINTED_SEED = 0  # the seed of the printed non-gold letter (App. E: "drawn per item with a fixed seed")


# -- reading records ---------------------------------------------------------------------------------
def jsonl_objects(text: str, name: str) -> list[tuple[dict[str, object], str]]:
    """Each non-blank line of a JSONL text as an object, with its ``name line N`` label; a line
    that is not a JSON object is one UserError naming it."""
    out = []
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{name} line {n}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(rec, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        out.append((rec, where))
    return out


def read_text(path: str | Path) -> str:
    """A file's text as UTF-8; a file that is not UTF-8 is one UserError naming the line."""
    p = Path(path)
    data = p.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(f"{p.name} line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8") from None


def load_jsonl_records(path: str | Path) -> list[tuple[dict[str, object], str]]:
    """Parsed JSONL objects with their ``file:line`` labels; a malformed line is a UserError."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"items file not found: {p}")
    out = jsonl_objects(read_text(p), p.name)
    if not out:
        raise UserError(f"items file is empty: {p}")
    return out


class _Identified(Protocol):
    """An item with an id (unique within its file)."""

    @property
    def id(self) -> str: ...


T = TypeVar("T", bound=_Identified)


def load_unique_items(
    path: str | Path, from_record: Callable[[Mapping[str, object], str], T], limit: int | None = None
) -> list[T]:
    """Items built by ``from_record`` from a JSONL file: errors name the file and line, ids must be
    unique, at most ``limit`` (>= 1) are returned."""
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}")
    items: list[T] = []
    seen: dict[str, str] = {}
    for rec, where in load_jsonl_records(path):
        item = from_record(rec, where)
        if item.id in seen:
            raise UserError(f"{where}: duplicate id '{item.id}' (first at {seen[item.id]})")
        seen[item.id] = where
        items.append(item)
    return items[:limit] if limit is not None else items


# -- P(True) questions ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class QAItem:
    """One question the model answers; ``aliases`` for free answers, ``gold_letter`` for lettered ones."""

    id: str
    question: str
    aliases: tuple[str, ...] = ()
    wrong: str | None = None
    choices: tuple[str, ...] | None = None
    gold_letter: str | None = None
    passage: str | None = None
    # the dataset's own prompt (lm-polygraph's input), answered as is; out of repr so that the digest of
    # items without one (every run before it existed) stays the same
    input_text: str | None = field(default=None, repr=False)
    # the quoted item's instruction (the letter instruction on MMLU, the "answer briefly" line on
    # TriviaQA): the text the paper's "Deleted" readout deletes; out of repr, as input_text
    instruction: str | None = field(default=None, repr=False)

    @property
    def lettered(self) -> bool:
        return self.choices is not None

    @property
    def gold_text(self) -> str:
        """The gold answer as text (first alias, or ``"B. <choice>"`` for lettered items)."""
        if self.choices is not None and self.gold_letter is not None:
            return f"{self.gold_letter}. {self.choices[LETTERS.index(self.gold_letter)]}"
        return self.aliases[0]

    @property
    def instruction_text(self) -> str | None:
        """The quoted item's instruction: the record's ``instruction``, else for a lettered item
        built here the letter instruction this module prints; None when the item has none."""
        if self.instruction is not None:
            return self.instruction
        if self.choices is not None and self.input_text is None:
            return LETTERED_INSTRUCTION
        return None

    @property
    def prompt_without_instruction(self) -> str | None:
        """The prompt with its instruction deleted (its last occurrence; the line breaks that joined
        it are tidied); None when the item has no instruction or the prompt does not contain it."""
        ins = self.instruction_text
        text = self.prompt
        if not ins or ins not in text:
            return None
        k = text.rfind(ins)
        out = text[:k] + text[k + len(ins) :]
        return re.sub(r"\n{3,}", "\n\n", out).strip("\n")

    @property
    def prompt(self) -> str:
        """The user turn the model answers (and the question quoted in the P(True) prompt)."""
        if self.input_text is not None:
            return self.input_text
        if self.choices is None:
            return self.question
        block = "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, self.choices))
        lead = f"{self.passage}\n\n" if self.passage else ""
        return f"{lead}{self.question}\n{block}\n{LETTERED_INSTRUCTION}"


def _str(rec: Mapping[str, Any], key: str, where: str) -> str:
    value = rec.get(key)
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: '{key}' must be a non-empty string")
    return value


def qa_item_from_record(rec: Mapping[str, Any], where: str) -> QAItem:
    """Validate one record of either schema (see the module docstring)."""
    if "id" not in rec or not isinstance(rec["id"], (str, int)) or rec["id"] == "":
        raise UserError(f"{where}: missing 'id'")
    item_id, question = str(rec["id"]), _str(rec, "question", where)
    if rec.get("choices") is not None:
        choices = rec["choices"]
        if not isinstance(choices, list) or len(choices) != 4 or not all(isinstance(c, str) and c for c in choices):
            raise UserError(f"{where}: 'choices' must be a list of 4 non-empty strings")
        if rec.get("answer") not in LETTERS:
            raise UserError(f"{where}: 'answer' must be one of A, B, C, D for a lettered item")
        passage = rec.get("passage")
        if passage is not None and not isinstance(passage, str):
            raise UserError(f"{where}: 'passage' must be a string")
        return QAItem(item_id, question, choices=tuple(choices), gold_letter=rec["answer"], passage=passage or None, input_text=_input(rec, where), instruction=_instruction(rec, where))
    answers = rec.get("answers")
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise UserError(f"{where}: needs 'answers' (a non-empty list of strings) or 'choices' + 'answer'")
    wrong = rec.get("wrong")
    if wrong is not None and (not isinstance(wrong, str) or not wrong.strip()):
        raise UserError(f"{where}: 'wrong' must be a non-empty string")
    return QAItem(item_id, question, aliases=tuple(answers), wrong=wrong, input_text=_input(rec, where), instruction=_instruction(rec, where))


def _instruction(rec: Mapping[str, Any], where: str) -> str | None:
    """``instruction``: the quoted item's instruction (what "Deleted" deletes), optional."""
    return _str(rec, "instruction", where) if rec.get("instruction") is not None else None


def _input(rec: Mapping[str, Any], where: str) -> str | None:
    """``input``: the dataset's own prompt text (sleight.readout.data's lm-polygraph loaders)."""
    return _str(rec, "input", where) if rec.get("input") is not None else None


def load_qa_items(path: str | Path, limit: int | None = None) -> list[QAItem]:
    """Items from a JSONL file (errors name the file and line), ids unique, at most ``limit``."""
    return load_unique_items(path, qa_item_from_record, limit)


def printed_wrong_letter(item_id: str, gold_letter: str, seed: int = PRINTED_SEED, letters: Sequence[str] = LETTERS) -> str:
    """The non-gold answer printed with a lettered item: a seeded draw among the non-gold letters,
    one stream per item (``[seed, crc32(item id)]``), so it does not depend on the order or the
    number of items. (Before issue #19 it was the first non-gold letter.)"""
    import zlib

    others = [x for x in letters if x != gold_letter]
    rng = np.random.default_rng([seed, zlib.crc32(str(item_id).encode())])
    return others[int(rng.integers(len(others)))]


# -- reader-forecast items -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RaceItem:
    """A RACE-style item: passage, question, four choices and the gold letter."""

    id: str
    passage: str
    question: str
    choices: tuple[str, str, str, str]
    answer: str


def race_item_from_record(rec: Mapping[str, Any], where: str) -> RaceItem:
    """Validate one record (``{id, passage, question, choices[4], answer}``)."""
    if "id" not in rec or not isinstance(rec["id"], (str, int)) or rec["id"] == "":
        raise UserError(f"{where}: missing 'id'")
    for key in ("passage", "question"):
        if not isinstance(rec.get(key), str) or not rec[key].strip():
            raise UserError(f"{where}: '{key}' must be a non-empty string (needs id, passage, question, choices[4], answer)")
    choices = rec.get("choices")
    if not isinstance(choices, list) or len(choices) != 4 or not all(isinstance(c, str) and c.strip() for c in choices):
        raise UserError(f"{where}: 'choices' must be a list of 4 non-empty strings")
    if rec.get("answer") not in LETTERS:
        raise UserError(f"{where}: 'answer' must be one of A, B, C, D, got {rec.get('answer')!r}")
    return RaceItem(str(rec["id"]), rec["passage"], rec["question"], tuple(choices), rec["answer"])


def load_race_items(path: str | Path, limit: int | None = None) -> list[RaceItem]:
    """Items from a JSONL file (errors name the file and line), ids unique, at most ``limit``."""
    return load_unique_items(path, race_item_from_record, limit)
