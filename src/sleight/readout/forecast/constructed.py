"""Table 7 (App. C.7, §3's second sample): the note-only reader on constructed notes rather than the
checkpoint's own -- half state the answer (the passage's first two sentences and "The correct answer
is X: ..."), half are the opening of an unrelated passage -- read once against the spaced
" A".." D" and the unspaced "A".."D" option strings.

One row per (item, spacing): the note's kind, the option first-token mass, whether the unrestricted
argmax is an option's first token, the pick (highest full-sequence log-probability), its
correctness against the passage's gold letter, and whether the two spacings pick the same option.

``inferred:`` the paper prints 240 rows, half of each kind, without saying how the kinds are laid
over the passages; here they alternate over the first 240 passages of A.1's list (the audit's
``mixed`` note mode, constructed first), each unrelated note the next passage's opening.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from sleight.backends import LanguageModel
from sleight.readout.audit.presets import LETTERS, forecast_items
from sleight.readout.forecast.pipeline import pick, reader_readings
from sleight.readout.items import RaceItem

CONSTRUCTED_ROW = ("item_id", "note_kind", "spacing", "mass", "argmax_on_option", "choice", "correct", "agree")
SPACING_NAMES: tuple[str, ...] = ("unspaced", "spaced")  # reader_readings' order


class ConstructedRow(TypedDict):
    """One row of Table 7 (:data:`CONSTRUCTED_ROW`'s columns): written to Parquet unchanged, so a
    TypedDict of its keys."""

    item_id: str
    note_kind: str
    spacing: str
    mass: float | None
    argmax_on_option: float
    choice: str | None
    correct: float | None
    agree: float | None


def constructed_notes(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Each record's (note kind, note text): constructed and unrelated alternating (the audit's
    ``mixed`` mode, :func:`~sleight.readout.audit.presets.forecast_items`)."""
    return [(str(i.meta["note_kind"]), str(i.meta["note"])) for i in forecast_items(records, note="mixed")]


def reader_rows(items: Sequence[RaceItem], kinds: Sequence[str], readings: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[ConstructedRow]:
    """The rows of Table 7 from the reader's readings (pure): per (item, spacing)."""
    rows: list[ConstructedRow] = []
    for it, kind, sets in zip(items, kinds, readings):
        picks = [pick(s["option_logprobs"]) for s in sets]
        agree = None if None in picks else float(picks[0] == picks[1])
        for spacing, s, k in zip(SPACING_NAMES, sets, picks):
            choice = None if k is None else LETTERS[k]
            rows.append(ConstructedRow(
                item_id=it.id,
                note_kind=kind,
                spacing=spacing,
                mass=s["option_mass"],
                argmax_on_option=float(s["argmax_class"] == "option"),
                choice=choice,
                correct=None if choice is None else float(choice == it.answer),
                agree=agree,
            ))
    return rows


def read_constructed(model: LanguageModel, items: Sequence[RaceItem], records: Sequence[Mapping[str, Any]]) -> list[ConstructedRow]:
    """App. C.7: the reader on each item's constructed note, both spacings (``records``: the same
    items as forecast records, whose passages the notes are cut from)."""
    notes = constructed_notes(records)
    readings = reader_readings(model, items, [text for _kind, text in notes])
    return reader_rows(items, [kind for kind, _text in notes], readings)
