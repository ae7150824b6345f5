"""``sleight readout scan``: audit the published scorers together, one row per preset.

For each chosen preset (:mod:`.scorers`) the scan

1. runs the full audit (:func:`~sleight.readout.audit.run.run_audit`) on the preset's items with the
   declared options, at the original position, with a space appended, and at the answer stem when
   the preset's repair is one -- its report is the row's drill-down;
2. reads the same original positions with the labels space-prefixed, and the repaired positions
   with the repair's options (:func:`sleight.position.read_positions`, one pass each);
3. for a text parser (OpenCompass), parses every greedy reply and computes the rotation contrast
   (:func:`~sleight.readout.scan.text_parsers.rotation_contrast`);
4. for items with human ratings grouped by document (G-Eval), the within-document Spearman of the
   as-declared first-token grade and of the full-sequence space-prefixed grade (:mod:`.grades`).

:func:`scan_row` (pure) turns those numbers into the row of the report (a
:class:`~sleight.readout.scan.records.ScanRow`): the shape of the study's Table 11. The rules behind
its flags are in :data:`FLAG_RULES`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sleight import rundir
from sleight.backends.base import LanguageModel
from sleight.position import OptionSetReading, PositionReading, read_positions, renormalise
from sleight.readout.audit.checks import MASS_FLOOR
from sleight.readout.audit.classify import is_numeric
from sleight.readout.audit.items import AuditItem
from sleight.readout.audit.run import AuditConfig, load_readings, run_audit
from sleight.readout.audit.summary import AuditSummary, VariantSummary
from sleight.readout.audit.variants import make_variant, render
from sleight.readout.scan.grades import paired_document_difference, within_document_spearman
from sleight.readout.scan.records import (
    ParsedReply,
    ParserResult,
    PositionSummary,
    RepairSummary,
    ScanFile,
    ScanGrades,
    ScanReading,
    ScanRow,
    ScanSummary,
)
from sleight.readout.scan.scorers import ScorerPreset, get_scorer, records_from_data, scorer_items, scorer_records
from sleight.readout.scan.text_parsers import TEXT_PARSERS, rotation_contrast
from sleight.rundir import RunDir

REPLY_TOKENS = 32  # greedy budget of a text-parsed reply (the audit's continuation is the reply)

FLAG_RULES: dict[str, str] = {
    "collapse": "median option mass as declared is below the floor, or undefined",
    "not scorable by first tokens": "the parser reads first tokens and some item's declared options share one, or lose their boundary",
    "declared labels share a first token": "the parser reads full sequences, but the declared labels share a first token (the mass counts it once)",
    "space-prefixed labels share a first token": "written with a leading space, the labels share a first token at the same position",
    "missing separator": "some rendered context ends without whitespace and the declared labels carry none",
    "letter read as verdict": "some item's parsed verdict follows its gold letter through the rotations (A at A, B at B)",
}
FAILING = ("collapse", "not scorable by first tokens", "letter read as verdict")


class ScanConfigRecord(TypedDict):
    """A scan's config as its run directory's manifest holds it (handed to :class:`~sleight.rundir.RunDir` as it is)."""

    presets: list[str]
    limit: int | None
    max_new_tokens: int
    reply_tokens: int
    templates: dict[str, str]
    records: dict[str, str]
    data: str | None


@dataclass(frozen=True)
class ScanConfig:
    """What a scan covers: presets, their inputs (default: the shipped templates and fixtures)."""

    presets: tuple[str, ...]
    limit: int | None = None  # source records per preset
    max_new_tokens: int = 16
    reply_tokens: int = REPLY_TOKENS
    floor: float = MASS_FLOOR
    templates: Mapping[str, str] = field(default_factory=dict)
    records: Mapping[str, str] = field(default_factory=dict)
    data: str | None = None  # a data-layer spec (race-h: Table 11; summeval: App. G) filled into every preset

    def record(self) -> ScanConfigRecord:
        """The run directory's config: everything that decides the readings (a resume with another
        value is refused; ``floor`` only judges, so it is left out)."""
        return {
            "presets": list(self.presets), "limit": self.limit, "max_new_tokens": self.max_new_tokens, "reply_tokens": self.reply_tokens,
            "templates": dict(self.templates), "records": dict(self.records), "data": self.data,
        }


@dataclass
class ScanResult:
    out_dir: Path
    rows: list[ScanRow]
    files: dict[str, Path]
    readings: list[ScanReading] = field(default_factory=list)
    new_presets: int = 0


KIND = "scan"
PARTS = "parts"
READINGS = "readings.parquet"
ROWS_DIR = "rows"
# One row per (preset, item): what Table 11 and App. G aggregate. ``mass``: the declared set's
# first-token mass at the original position; ``mass_spaced``: the labels with a leading space there;
# ``argmax_option``: the unrestricted argmax is a declared option's first token; ``score_first``:
# the first-token grade as declared; ``score_full_spaced``: the full-sequence grade of the
# space-prefixed labels (App. G's repaired readout); ``human``: the record's rating where it has one.
SCAN_SCHEMA = pa.schema(
    [
        ("preset", pa.string()), ("item_id", pa.string()), ("doc_id", pa.string()), ("human", pa.float64()),
        ("mass", pa.float64()), ("mass_spaced", pa.float64()), ("mass_repaired", pa.float64()),
        ("distinct", pa.bool_()), ("distinct_spaced", pa.bool_()), ("boundary", pa.bool_()), ("argmax_option", pa.bool_()),
        ("ends_with_whitespace", pa.bool_()), ("score_first", pa.float64()), ("score_full_spaced", pa.float64()),
    ]
)


def part_key(preset: str) -> str:
    """A preset's folder and part name (``geval:fluency`` -> ``geval-fluency``)."""
    return preset.replace(":", "-")


# -- pure pieces ------------------------------------------------------------------------------------
def _median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.median(vals)) if vals else None


def _rate(flags: Sequence[bool | None]) -> float | None:
    vals = [bool(f) for f in flags if f is not None]
    return sum(vals) / len(vals) if vals else None


def expected_score(logprobs: Sequence[float | None], options: Sequence[str], scale: float) -> float | None:
    """Renormalised score over a declared set: the expected value for numeric labels (``int(o) /
    scale``), else the first label's probability; None where any log-prob is missing."""
    p = renormalise(list(logprobs))
    if p is None:
        return None
    if is_numeric(options):
        return float(sum(int(o) / scale * pi for o, pi in zip(options, p)))
    return float(p[0])


def first_token_score(s: OptionSetReading, scale: float) -> float | None:
    """The score a first-token parser reads: the declared set renormalised over first tokens."""
    if not s.boundary_preserved:
        return None
    return expected_score(list(s.first_logprobs), s.options, scale)


def position_summary(sets: Sequence[OptionSetReading], floor: float) -> PositionSummary:
    """Mass and distinctness of one option set over the items (None masses counted, never 0)."""
    masses = [s.mass for s in sets]
    med = _median(masses)
    return PositionSummary(
        mass_median=med,
        mass_null=sum(m is None for m in masses),
        below_floor=sum(m is not None and m < floor for m in masses),
        distinct_rate=_rate([s.distinct if s.boundary_preserved else None for s in sets]),
        boundary_rate=_rate([s.boundary_preserved for s in sets]),
        clears_floor=med is not None and med >= floor,
    )


def _most_common(counts: Mapping[str, int] | None) -> str | None:
    live = {k: v for k, v in (counts or {}).items() if v}
    return max(live, key=lambda k: (live[k], k)) if live else None


def scan_flags(row: ScanRow, parser: str, options: Sequence[str], floor: float) -> list[str]:
    """The failure modes a row shows, by the rules in :data:`FLAG_RULES`."""
    flags = []
    d = row.declared
    if d.mass_median is None or d.mass_median < floor:
        flags.append("collapse")
    shared = (d.distinct_rate is not None and d.distinct_rate < 1) or (d.boundary_rate or 0) < 1
    if shared and parser == "first_token":
        flags.append("not scorable by first tokens")
    elif d.distinct_rate is not None and d.distinct_rate < 1:
        flags.append("declared labels share a first token")
    sp = row.spaced
    if sp.distinct_rate is not None and sp.distinct_rate < 1:
        flags.append("space-prefixed labels share a first token")
    ws = row.separator_rate
    if (ws is None or ws < 1) and not any(o[:1].isspace() for o in options):
        flags.append("missing separator")
    if row.parser_result is not None and row.parser_result.tracking_items:
        flags.append("letter read as verdict")
    return flags


def verdict_of(flags: Sequence[str]) -> str:
    if any(f in FAILING for f in flags):
        return "fail"
    return "warn" if flags else "pass"


def original_summary(summary: AuditSummary | Mapping[str, Any]) -> VariantSummary | None:
    """The audit summary's original-position numbers as its summary.json holds them (from the typed
    :class:`AuditSummary` of a run, or its JSON form); None where it has no original variant."""
    variants = summary.get("variants") if isinstance(summary, Mapping) else summary.variants
    orig = (variants or {}).get("original")
    if orig is None:
        return None
    return VariantSummary.from_json(orig if isinstance(orig, Mapping) else orig.as_json())


def scan_row(
    preset: ScorerPreset,
    summary: AuditSummary | Mapping[str, Any],
    declared: Sequence[OptionSetReading],
    spaced: Sequence[OptionSetReading],
    repaired: Sequence[OptionSetReading],
    *,
    report: str,
    floor: float = MASS_FLOOR,
    parser_result: ParserResult | None = None,
    grades: ScanGrades | None = None,
) -> ScanRow:
    """One row of the scan report from the audit summary and the three readings of each item."""
    orig = original_summary(summary) or VariantSummary(n_measured=len(declared))
    row = ScanRow(
        preset=preset.name,
        title=preset.title,
        source=preset.source,
        rendering=preset.rendering,
        parser=preset.parser,
        parser_note=preset.parser_note,
        label_format=preset.label_format,
        options=preset.options,
        spaced_options=preset.spaced_options,
        n_items=orig.n_measured,
        declared=position_summary(declared, floor),
        spaced=position_summary(spaced, floor),
        separator_rate=orig.ends_with_whitespace_rate,
        argmax_class=_most_common(orig.argmax_classes),
        argmax_classes=dict(orig.argmax_classes or {}),
        continuation=_most_common(orig.continuation_classes),
        continuation_classes=dict(orig.continuation_classes or {}),
        repair=RepairSummary(preset.repair.kind, preset.repair.description, preset.repair.options, position_summary(repaired, floor)),
        parser_result=parser_result,
        grades=grades,
        report=report,
    )
    flags = scan_flags(row, preset.parser, preset.options, floor)
    return replace(row, flags=tuple(flags), verdict=verdict_of(flags))


def reading_rows(
    preset: ScorerPreset,
    items: Sequence[AuditItem],
    contexts: Sequence[str],
    pos: Sequence[PositionReading],
    repaired: Sequence[OptionSetReading],
) -> list[ScanReading]:
    """The readings of one preset, one row per item (:data:`SCAN_SCHEMA`)."""
    out = []
    for it, ctx, p, rep in zip(items, contexts, pos, repaired):
        d, sp = p.option_sets[0], p.option_sets[1]
        out.append(
            ScanReading(
                preset=preset.name, item_id=it.id, doc_id=str(it.meta.get("doc_id", it.id)), human=it.target,
                mass=d.mass, mass_spaced=sp.mass, mass_repaired=rep.mass,
                distinct=d.distinct if d.boundary_preserved else None, distinct_spaced=sp.distinct if sp.boundary_preserved else None,
                boundary=d.boundary_preserved, argmax_option=p.argmax_id in {i for i in d.first_ids if i is not None},
                ends_with_whitespace=ctx[-1:].isspace(),
                score_first=first_token_score(d, preset.score_scale),
                score_full_spaced=expected_score(list(sp.logprobs), sp.options, preset.score_scale),
            )
        )
    return out


# -- model work -------------------------------------------------------------------------------------
def repaired_context(model: LanguageModel, item: AuditItem, original: str, preset: ScorerPreset) -> str:
    """The rendered context at the preset's repair: separator appended where whitespace is missing,
    the stem prefilled, or the original position (labels repair)."""
    r = preset.repair
    if r.kind == "separator":
        return original if original[-1:].isspace() else original + r.text
    if r.kind == "stem":
        spec = make_variant(replace(item, stem=r.text), "stem")
        return render(model, spec)  # type: ignore[arg-type]
    return original


def _grades(items: Sequence[AuditItem], declared: Sequence[OptionSetReading], spaced: Sequence[OptionSetReading], scale: float, B: int) -> ScanGrades | None:
    docs = [i.meta.get("doc_id") for i in items]
    human = [i.target for i in items]
    if any(d is None for d in docs) or any(h is None for h in human):
        return None
    first = [first_token_score(s, scale) for s in declared]
    full = [expected_score(list(s.logprobs), s.options, scale) for s in spaced]
    return ScanGrades(
        declared_first_token=within_document_spearman(first, human, docs),  # type: ignore[arg-type]
        spaced_full_sequence=within_document_spearman(full, human, docs),  # type: ignore[arg-type]
        difference=paired_document_difference(full, first, human, docs, B=B),  # type: ignore[arg-type]
    )


def preset_records(preset: ScorerPreset, config: ScanConfig) -> list[dict[str, object]]:
    """A preset's records: the data spec's (each App. G document counts once against ``limit``), a
    user's file, or the shipped fixture."""
    if config.data is None:
        return scorer_records(preset, config.records.get(preset.name))
    from sleight.readout.data import load_data

    ds = load_data(config.data)
    recs = records_from_data(preset, ds.view("grade" if ds.family == "summeval" else "forecast", None))
    return [{**r, "item": r["doc_id"]} for r in recs]


def scan_preset(
    model: LanguageModel,
    name: str,
    out_dir: Path,
    config: ScanConfig,
    *,
    overwrite: bool = False,
    show_progress: bool = False,
    B: int = 20000,
) -> tuple[ScanRow, list[ScanReading]]:
    """Audit one preset into ``out_dir / part_key(name)``; its scan row and its readings."""
    preset = get_scorer(name)
    records = preset_records(preset, config)
    items = scorer_items(name, records, template=config.templates.get(name), limit=config.limit)
    variants = ("original", "space") + (("stem",) if any(i.stem for i in items) else ())
    budget = config.reply_tokens if preset.text_parser else config.max_new_tokens
    source = config.data or config.records.get(name) or "shipped fixture"
    audit_cfg = AuditConfig(source=f"scorer preset {name} ({source}; template {config.templates.get(name) or 'shipped'})", variants=variants, max_new_tokens=budget, floor=config.floor)
    sub = out_dir / part_key(name)
    result = run_audit(model, items, sub, audit_cfg, overwrite=overwrite, show_progress=show_progress)
    df = load_readings(sub)
    orig = df[df["variant"] == "original"].set_index("item_id")
    contexts = [str(orig.loc[i.id, "context"]) for i in items]
    pos = read_positions(model, contexts, [[preset.options, preset.spaced_options]] * len(items), score_options=True)
    declared = [p.option_sets[0] for p in pos]
    spaced = [p.option_sets[1] for p in pos]
    rep_ctx = [repaired_context(model, i, c, preset) for i, c in zip(items, contexts)]
    repaired = [p.option_sets[0] for p in read_positions(model, rep_ctx, [[preset.repair.options]] * len(items))]
    parser_result = None
    if preset.text_parser:
        parse = TEXT_PARSERS[preset.text_parser]
        replies = tuple(
            ParsedReply(item=i.meta.get("item", i.id), gold_letter=i.meta.get("gold_letter"), reply=str(orig.loc[i.id, "continuation"]), verdict=parse(str(orig.loc[i.id, "continuation"])))
            for i in items
        )
        parser_result = ParserResult(replies, rotation_contrast(replies) if all(r["gold_letter"] for r in replies) else None)
    report = result.files.get("report_html", sub / "report.html")
    row = scan_row(
        preset,
        result.summary,
        declared,
        spaced,
        repaired,
        report=str(Path(report).relative_to(out_dir)),
        floor=config.floor,
        parser_result=parser_result,
        grades=_grades(items, declared, spaced, preset.score_scale, B),
    )
    return row, reading_rows(preset, items, contexts, pos, repaired)


def run_scan(
    model: LanguageModel | Callable[[], LanguageModel],
    out_dir: str | Path,
    config: ScanConfig,
    *,
    overwrite: bool = False,
    show_progress: bool = True,
    B: int = 20000,
) -> ScanResult:
    """Every chosen preset audited under ``out_dir`` (a ``scan`` run directory: one committed part
    per preset, so a killed scan resumes at the first preset not done, and a finished one loads no
    model), then readings.parquet, scan.json, scan.md and scan.html.

    ``model``: the model, or a function that loads it (called only when a preset is left to do)."""
    from sleight.readout.scan.report import write_scan_reports

    out = Path(out_dir)
    for name in config.presets:  # every input checked before the run directory is touched
        get_scorer(name)
    run = RunDir(out, KIND)
    run.check(config.record(), overwrite=overwrite)
    parts = run.parts(PARTS, SCAN_SCHEMA)
    keys = [part_key(n) for n in config.presets]
    done = {k for k in parts.verified(keys) if (out / ROWS_DIR / f"{k}.json").is_file()}
    todo = [n for n in config.presets if part_key(n) not in done]
    loaded: list[LanguageModel] = []

    def start() -> Mapping[str, object]:
        loaded.append(model() if callable(model) and not hasattr(model, "info") else model)  # type: ignore[arg-type]
        return loaded[0].info.as_dict()

    def write(key: str, tmp_dir: Path) -> None:
        name = by_key[key]
        if show_progress:
            print(f"scan: {name}", flush=True)
        row, readings = scan_preset(loaded[0], name, out, config, show_progress=show_progress, B=B)
        rundir.write_json(out / ROWS_DIR / f"{key}.json", row.as_record())  # before the part: the part commits the preset
        parts.write(key, rundir.table_from_rows(readings, SCAN_SCHEMA), tmp_dir=tmp_dir)

    by_key = {part_key(n): n for n in config.presets}
    run.commit_parts(config.record(), [part_key(n) for n in todo], units=len(config.presets), start=start, write=write)
    rows = [ScanRow.from_record(rundir.read_json(out / ROWS_DIR / f"{k}.json")) for k in keys]
    table = parts.read(keys)
    rundir.write_table(out / READINGS, table, schema=SCAN_SCHEMA)
    manifest = run.require()
    summary = ScanSummary(model=dict(manifest.get("model") or {}), presets=tuple(config.presets), limit=config.limit, floor=config.floor, flag_rules=dict(FLAG_RULES))
    rundir.write_json(out / "scan.json", ScanFile(summary, tuple(rows)).as_record())
    md, page = write_scan_reports(out, summary, rows)
    files = {"scan_json": out / "scan.json", "scan_md": md, "scan_html": page, "readings": out / READINGS}
    return ScanResult(out, rows, files, _readings(table), len(todo))


def _readings(table: pa.Table) -> list[ScanReading]:
    """The rows of a table read with :data:`SCAN_SCHEMA` (its columns are :class:`ScanReading`'s keys)."""
    return cast(list[ScanReading], table.to_pylist())


def load_readings_table(out_dir: str | Path) -> list[ScanReading]:
    """A finished scan's readings (one row per preset and item)."""
    return _readings(pq.read_table(Path(out_dir) / READINGS, schema=SCAN_SCHEMA))


def load_scan(out_dir: str | Path) -> ScanFile:
    """A finished scan's scan.json: its summary and its rows."""
    return ScanFile.from_record(json.loads((Path(out_dir) / "scan.json").read_text(encoding="utf-8")))
