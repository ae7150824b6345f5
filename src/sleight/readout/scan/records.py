"""What a scan writes, as typed records: its rows, their parts, its summary and its readings.

:func:`sleight.readout.scan.run.scan_row` builds a :class:`ScanRow` per preset; the flag rules and
the reports read its attributes. The files keep their shape: each record's ``as_record`` is the
JSON object the scan has always written (its keys in their order; rows/<preset>.json, scan.json)
and ``from_record`` reads one back, so existing run directories load. A reading (one row of
readings.parquet) is a :class:`ScanReading`, a typed dict: it goes to the table and to the
reproduced tables as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from sleight.readout.scan.grades import DocumentRho, PairedDocumentDifference
from sleight.readout.scan.scorers import Source
from sleight.readout.scan.text_parsers import RotationContrast


@dataclass(frozen=True)
class PositionSummary:
    """Mass and distinctness of one option set over a preset's (or a task's) items, at one scored
    position: the numbers the flag rules read. None masses are counted (``mass_null``), never 0."""

    mass_median: float | None
    mass_null: int
    below_floor: int
    distinct_rate: float | None
    boundary_rate: float | None
    clears_floor: bool

    def as_record(self) -> dict[str, object]:
        return {
            "mass_median": self.mass_median, "mass_null": self.mass_null, "below_floor": self.below_floor,
            "distinct_rate": self.distinct_rate, "boundary_rate": self.boundary_rate, "clears_floor": self.clears_floor,
        }

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> PositionSummary:
        return cls(d["mass_median"], int(d["mass_null"]), int(d["below_floor"]), d["distinct_rate"], d["boundary_rate"], bool(d["clears_floor"]))


@dataclass(frozen=True)
class RepairSummary:
    """The preset's repair (what it changes, the options read there) and that position's numbers;
    its record holds the position's keys after its own."""

    kind: str
    description: str
    options: tuple[str, ...]
    position: PositionSummary

    def as_record(self) -> dict[str, object]:
        return {"kind": self.kind, "description": self.description, "options": list(self.options), **self.position.as_record()}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> RepairSummary:
        return cls(str(d["kind"]), str(d["description"]), tuple(d["options"]), PositionSummary.from_record(d))


class ParsedReply(TypedDict):
    """A text-parsed preset's greedy reply to one rotation of a quoted item and the verdict its
    parser reads (written to the row as it is, and read by the rotation contrast)."""

    item: str
    gold_letter: str | None
    reply: str
    verdict: str


@dataclass(frozen=True)
class ParserResult:
    """A text parser's replies, with their rotation contrast when every reply has a gold letter
    (without one, no item is read as tracking its letter)."""

    replies: tuple[ParsedReply, ...]
    contrast: RotationContrast | None = None

    @property
    def tracking_items(self) -> tuple[str, ...]:
        return self.contrast.tracking_items if self.contrast is not None else ()

    def as_record(self) -> dict[str, object]:
        replies = [dict(r) for r in self.replies]
        if self.contrast is None:
            return {"replies": replies, "tracking_items": []}
        return {**self.contrast.as_record(), "replies": replies}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> ParserResult:
        replies = tuple(ParsedReply(item=r["item"], gold_letter=r["gold_letter"], reply=r["reply"], verdict=r["verdict"]) for r in d["replies"])
        return cls(replies, RotationContrast.from_record(d) if "per_letter" in d else None)


@dataclass(frozen=True)
class ScanGrades:
    """Agreement with human ratings where the items carry them grouped by document (App. G): the
    as-declared first-token grade, the space-prefixed full-sequence grade, their paired difference."""

    declared_first_token: DocumentRho
    spaced_full_sequence: DocumentRho
    difference: PairedDocumentDifference

    def as_record(self) -> dict[str, object]:
        return {
            "declared_first_token": self.declared_first_token.as_record(),
            "spaced_full_sequence": self.spaced_full_sequence.as_record(),
            "difference": self.difference.as_record(),
        }

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> ScanGrades:
        return cls(
            DocumentRho.from_record(d["declared_first_token"]),
            DocumentRho.from_record(d["spaced_full_sequence"]),
            PairedDocumentDifference.from_record(d["difference"]),
        )


@dataclass(frozen=True)
class ScanRow:
    """One preset's row of the scan report (the shape of the study's Table 11): the specification
    audited, its positions' numbers, the flags they raise and the link to its audit report."""

    preset: str
    title: str
    source: Source
    rendering: str
    parser: str
    parser_note: str
    label_format: str
    options: tuple[str, ...]
    spaced_options: tuple[str, ...]
    n_items: int
    declared: PositionSummary
    spaced: PositionSummary
    separator_rate: float | None
    argmax_class: str | None
    argmax_classes: Mapping[str, int]
    continuation: str | None
    continuation_classes: Mapping[str, int]
    repair: RepairSummary
    parser_result: ParserResult | None
    grades: ScanGrades | None
    report: str  # the preset's audit report, relative to the scan's folder
    flags: tuple[str, ...] = ()
    verdict: str = "pass"

    def as_record(self) -> dict[str, object]:
        return {
            "preset": self.preset,
            "title": self.title,
            "source": self.source.as_record(),
            "rendering": self.rendering,
            "parser": self.parser,
            "parser_note": self.parser_note,
            "label_format": self.label_format,
            "options": list(self.options),
            "spaced_options": list(self.spaced_options),
            "n_items": self.n_items,
            "declared": self.declared.as_record(),
            "spaced": self.spaced.as_record(),
            "separator_rate": self.separator_rate,
            "argmax_class": self.argmax_class,
            "argmax_classes": dict(self.argmax_classes),
            "continuation": self.continuation,
            "continuation_classes": dict(self.continuation_classes),
            "repair": self.repair.as_record(),
            "parser_result": None if self.parser_result is None else self.parser_result.as_record(),
            "grades": None if self.grades is None else self.grades.as_record(),
            "report": self.report,
            "flags": list(self.flags),
            "verdict": self.verdict,
        }

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> ScanRow:
        parser_result, grades = d.get("parser_result"), d.get("grades")
        return cls(
            preset=str(d["preset"]),
            title=str(d["title"]),
            source=Source.from_record(d["source"]),
            rendering=str(d["rendering"]),
            parser=str(d["parser"]),
            parser_note=str(d["parser_note"]),
            label_format=str(d["label_format"]),
            options=tuple(d["options"]),
            spaced_options=tuple(d["spaced_options"]),
            n_items=int(d["n_items"]),
            declared=PositionSummary.from_record(d["declared"]),
            spaced=PositionSummary.from_record(d["spaced"]),
            separator_rate=d["separator_rate"],
            argmax_class=d["argmax_class"],
            argmax_classes=dict(d.get("argmax_classes") or {}),
            continuation=d["continuation"],
            continuation_classes=dict(d.get("continuation_classes") or {}),
            repair=RepairSummary.from_record(d["repair"]),
            parser_result=ParserResult.from_record(parser_result) if parser_result else None,
            grades=ScanGrades.from_record(grades) if grades else None,
            report=str(d["report"]),
            flags=tuple(d["flags"]),
            verdict=str(d["verdict"]),
        )


class ScanReading(TypedDict):
    """One row of readings.parquet (``SCAN_SCHEMA`` in :mod:`.run`, the same columns in the same
    order): one preset's readings of one item, what Table 11 and App. G aggregate."""

    preset: str
    item_id: str
    doc_id: str
    human: float | None
    mass: float | None
    mass_spaced: float | None
    mass_repaired: float | None
    distinct: bool | None
    distinct_spaced: bool | None
    boundary: bool
    argmax_option: bool
    ends_with_whitespace: bool
    score_first: float | None
    score_full_spaced: float | None


@dataclass(frozen=True)
class ScanSummary:
    """What every scan report states above its rows: the model record, the presets, the records per
    preset and the floor, and the flag rules (typed, so a renderer cannot misspell a key)."""

    model: Mapping[str, object]
    presets: tuple[str, ...]
    limit: int | None
    floor: float
    flag_rules: Mapping[str, str] = field(default_factory=dict)
    tool: str = "sleight readout scan"

    def as_record(self) -> dict[str, object]:
        return {
            "model": dict(self.model), "presets": list(self.presets), "limit": self.limit, "floor": self.floor,
            "flag_rules": dict(self.flag_rules), "tool": self.tool,
        }

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> ScanSummary:
        return cls(dict(d.get("model") or {}), tuple(d["presets"]), d.get("limit"), d["floor"], dict(d.get("flag_rules") or {}), str(d.get("tool", cls.tool)))


@dataclass(frozen=True)
class ScanFile:
    """scan.json: the summary (its ``manifest``) and one row per preset, in the scan's order."""

    summary: ScanSummary
    rows: tuple[ScanRow, ...]

    def as_record(self) -> dict[str, object]:
        return {"manifest": self.summary.as_record(), "rows": [r.as_record() for r in self.rows]}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> ScanFile:
        return cls(ScanSummary.from_record(d["manifest"]), tuple(ScanRow.from_record(r) for r in d["rows"]))
