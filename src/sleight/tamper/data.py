"""The benchmark's inputs: questions and substitute words (SPEC §3.1), shipped or the user's own.

The shipped files are the study's: 100 questions (ids q001-q100) and 101 substitutes, the entity
phrase "Mandela effect" first, then 100 neutral words. Their order is part of the benchmark.
The first substitute of any list is its entity condition (``is_entity`` in the trial table).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from sleight.errors import UserError

QUESTIONS_FILE = "sleight_questions.jsonl"
SUBSTITUTES_FILE = "sleight_substitutes.txt"
ENTITY_INDEX = 0  # the first substitute is the entity condition


@dataclass(frozen=True)
class Question:
    id: str
    question: str


def _read(path: Path | str | None, shipped: str) -> tuple[str, str]:
    """(text, source) of a user file or of the shipped data file."""
    if path is None:
        return resources.files("sleight").joinpath("data", shipped).read_text(encoding="utf-8"), "shipped"
    p = Path(path)
    if not p.is_file():
        raise UserError(f"file not found: {p}")
    try:
        return p.read_text(encoding="utf-8"), str(p.resolve())
    except UnicodeDecodeError:
        raise UserError(f"{p} is not UTF-8 text") from None


def parse_questions(text: str, source: str) -> list[Question]:
    """JSONL, one ``{"id": ..., "question": ...}`` per line; blank lines are skipped."""
    out: list[Question] = []
    seen: dict[str, tuple[int, bool]] = {}  # id -> (line, whether the id was given automatically)
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:  # its own "line 1" is the line's, not the file's
            raise UserError(f"{source}, line {n}, column {exc.colno}: not valid JSON ({exc.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("question"), str) or not rec["question"].strip():
            raise UserError(f'{source}, line {n}: expected an object with a non-empty "question" string')
        auto = not rec.get("id")
        qid = f"q{len(out) + 1:03d}" if auto else str(rec["id"])
        if qid in seen:
            raise UserError(f"{source}, line {n}: {_collision(qid, auto, n, *seen[qid])}")
        seen[qid] = (n, auto)
        out.append(Question(qid, rec["question"]))
    if not out:
        raise UserError(f"{source} holds no questions")
    return out


def _collision(qid: str, auto: bool, line: int, first_line: int, first_auto: bool) -> str:
    """Why two questions share an id, naming both lines (an automatic id is the question's position)."""
    how = 'has no "id", so it is numbered {qid!r} by its position'
    if not auto and not first_auto:
        return f"duplicate question id {qid!r} (first on line {first_line})"
    if auto and first_auto:  # cannot happen (positions differ); kept for completeness
        return f"automatic question id {qid!r} repeats line {first_line}'s"
    if first_auto:
        return f"question id {qid!r} is already the automatic id of line {first_line}, which {how.format(qid=qid)}; give every question an id, or none"
    return f"this question {how.format(qid=qid)}, but line {first_line} gives that id explicitly; give every question an id, or none"


def parse_substitutes(text: str, source: str) -> list[str]:
    """One substitute word or phrase per line; blank lines and '#' comment lines are skipped."""
    out: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        if word in out:
            raise UserError(f"{source}, line {n}: duplicate substitute {word!r}")
        out.append(word)
    if not out:
        raise UserError(f"{source} holds no substitutes")
    return out


def load_questions(path: Path | str | None = None, limit: int | None = None) -> tuple[list[Question], str]:
    """The first ``limit`` questions (all when None) of a file or the shipped set, and the source."""
    text, source = _read(path, QUESTIONS_FILE)
    return _first(parse_questions(text, source), limit, "--questions"), source


def load_substitutes(path: Path | str | None = None, limit: int | None = None) -> tuple[list[str], str]:
    """The first ``limit`` substitutes (all when None) of a file or the shipped list, and the source."""
    text, source = _read(path, SUBSTITUTES_FILE)
    return _first(parse_substitutes(text, source), limit, "--substitutes"), source


def _first(items: list, limit: int | None, flag: str) -> list:
    if limit is None:
        return items
    if limit < 1:
        raise UserError(f"{flag} must be at least 1 (got {limit})")
    return items[:limit]


def digest(items: list) -> str:
    """A hash of the exact inputs, so a run directory can tell whether it is being resumed as made."""
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode()).hexdigest()
