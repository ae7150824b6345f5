"""Table 7 (App. C.7, §3's second sample): the note-only reader on constructed notes rather than the
checkpoint's own -- half state the answer (the passage's first two sentences and "The correct answer
is X: ..."), half are the opening of an unrelated passage -- read once against the spaced
" A".." D" and the unspaced "A".."D" option strings.

One row per (item, spacing): the note's kind, the option first-token mass, whether the unrestricted
argmax is an option's first token, the pick (highest full-sequence log-probability), its
correctness against the passage's gold letter, and whether the two spacings pick the same option.
Beside it, the forecast prompt of App. B with the same note is read at its original position, so each
row says whether the forecast's and the reader task's unrestricted argmax are the same token (App. B
counts them: 59 of 60 rows whose notes state the answer, 38 of 60 whose notes do not).

``inferred:`` the paper prints 240 rows, half of each kind, without saying how the kinds are laid
over the passages; here they alternate over the first 240 passages of A.1's list (the audit's
``mixed`` note mode, constructed first), each unrelated note the next passage's opening.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from sleight.backends import LanguageModel
from sleight.position import read_positions
from sleight.readout.audit.presets import FORECAST_OPTIONS, LETTERS, forecast_items
from sleight.readout.audit.variants import VariantSpec, make_variant, render
from sleight.readout.forecast.pipeline import pick, reader_readings
from sleight.readout.items import RaceItem

CONSTRUCTED_ROW = (
    "item_id", "note_kind", "spacing", "mass", "argmax_on_option", "choice", "correct", "agree", "argmax_id", "forecast_argmax_id", "same_argmax",
)
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
    argmax_id: int | None  # the reader task's unrestricted argmax (one position, both spacings)
    forecast_argmax_id: int | None  # the forecast prompt's, with the same note (App. B); None: not read
    same_argmax: float | None  # 1.0 where the two are the same token


def constructed_notes(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Each record's (note kind, note text): constructed and unrelated alternating (the audit's
    ``mixed`` mode, :func:`~sleight.readout.audit.presets.forecast_items`)."""
    return _kinds_and_notes(forecast_items(records, note="mixed"))


def _kinds_and_notes(audit_items: Sequence[Any]) -> list[tuple[str, str]]:
    return [(str(i.meta["note_kind"]), str(i.meta["note"])) for i in audit_items]


def reader_rows(
    items: Sequence[RaceItem], kinds: Sequence[str], readings: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], forecast_argmax: Sequence[int | None] | None = None,
) -> list[ConstructedRow]:
    """The rows of Table 7 from the reader's readings (pure): per (item, spacing); ``forecast_argmax``:
    each item's forecast-prompt argmax id (App. B), where it was read."""
    rows: list[ConstructedRow] = []
    forecast = list(forecast_argmax) if forecast_argmax is not None else [None] * len(items)
    for it, kind, sets, f_arg in zip(items, kinds, readings, forecast):
        arg = sets[0].get("argmax_id")
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
                argmax_id=arg,
                forecast_argmax_id=f_arg,
                same_argmax=None if f_arg is None or arg is None else float(f_arg == arg),
            ))
    return rows


def read_constructed(model: LanguageModel, items: Sequence[RaceItem], records: Sequence[Mapping[str, Any]]) -> list[ConstructedRow]:
    """App. C.7: the reader on each item's constructed note, both spacings (``records``: the same
    items as forecast records, whose passages the notes are cut from); App. B: the forecast prompt
    with the same note, at its original position (the audit's ``original`` variant)."""
    audit_items = forecast_items(records, note="mixed")
    notes = _kinds_and_notes(audit_items)
    readings = reader_readings(model, items, [text for _kind, text in notes])
    specs = [make_variant(i, "original") for i in audit_items]
    contexts = [render(model, sp) for sp in specs if isinstance(sp, VariantSpec)]
    reads = iter(read_positions(model, contexts, [[FORECAST_OPTIONS]] * len(contexts)))
    forecast = [next(reads).argmax_id if isinstance(sp, VariantSpec) else None for sp in specs]
    return reader_rows(items, [kind for kind, _text in notes], readings, forecast)
