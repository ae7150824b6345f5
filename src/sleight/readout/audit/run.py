"""Running an audit into a directory that survives a crash, and re-rendering it.

Layout of an audit directory::

    manifest.json     config, model record, fingerprint of (items, config, model)
    parts/            one Parquet file per finished chunk of items (removed once merged)
    readings.parquet  one row per (item, variant), the public schema (measure.SCHEMA)
    summary.json      per-variant numbers (checks.summarise), plus P(True) readouts for that preset
    report.md/.html   the six checks with verdicts, evidence and worked examples; the variant table
    ptrue.parquet     (ptrue preset only) one row per (pair, P(True) readout), as ``readout ptrue`` writes them

The directory is a :mod:`sleight.rundir` run directory (kind ``audit``; ``sessions/`` holds one record
per process). A killed run restarts where it stopped: the items of sound parts (and of a merged
``readings.parquet``) are not measured again, a damaged part is moved aside and redone, and a
directory holding a different audit is refused with one line naming the differing field
(``--overwrite`` starts over). Items are cut into a fixed partition of ``chunk_items`` chunks, so a
resumed run measures exactly the batches of an uninterrupted one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TypedDict, cast

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sleight import rundir
from sleight.backends import LanguageModel
from sleight.errors import UserError
from sleight.progress import SweepProgress
from sleight.readout.audit.checks import MASS_FLOOR, Check, run_checks, summarise
from sleight.readout.audit.items import AuditItem
from sleight.readout.audit.manifest import AuditManifest, AuditRunConfig
from sleight.readout.audit.measure import DEFAULT_ROWS_PER_PASS, SCHEMA, measure, rows_to_table
from sleight.readout.audit.report import write_reports
from sleight.readout.audit.summary import AuditSummary, PTrueSection
from sleight.readout.audit.variants import VARIANTS
from sleight.rundir import RunDir


@dataclass
class AuditConfig:
    """What an audit measures (everything that changes the readings is in the fingerprint)."""

    source: str = "items"
    preset: str | None = None
    options: tuple[str, ...] | None = None
    stem: str | None = None
    variants: tuple[str, ...] = VARIANTS
    max_new_tokens: int = 16
    floor: float = MASS_FLOOR
    rows_per_pass: int = DEFAULT_ROWS_PER_PASS
    chunk_items: int = 1
    n_items: int = 0

    def readings_key(self) -> dict[str, object]:
        d = asdict(self)
        for k in ("floor", "rows_per_pass", "chunk_items", "n_items", "source"):
            d.pop(k)
        return d


@dataclass
class AuditResult:
    out_dir: Path
    summary: AuditSummary
    checks: list[Check]
    files: dict[str, Path] = field(default_factory=dict)


# The config fields that decide the readings; a resume with another value is refused.
IDENTITY_KEYS = ("preset", "options", "stem", "variants", "max_new_tokens", "chunk_items", "items_sha256")
PARTS = "parts"
READINGS = "readings.parquet"


def run_config(items: Sequence[AuditItem], config: AuditConfig) -> AuditRunConfig:
    """The manifest's ``config``: the audit config (its fields in order) and a hash of the exact items."""
    return AuditRunConfig(
        source=config.source,
        preset=config.preset,
        options=list(config.options) if config.options else None,
        stem=config.stem,
        variants=list(config.variants),
        max_new_tokens=config.max_new_tokens,
        floor=config.floor,
        rows_per_pass=config.rows_per_pass,
        chunk_items=config.chunk_items,
        n_items=config.n_items,
        items_sha256=rundir.digest([asdict(i) for i in items]),
    )


def fingerprint(items: Sequence[AuditItem], config: AuditConfig, model_info: Mapping[str, object]) -> str:
    """Hash of what determines the readings: items, options, stem, variants, budget, model."""
    return rundir.fingerprint(run_config(items, config), model_info, IDENTITY_KEYS)


def _done_ids(out: Path, parts: rundir.Parts, chunks: dict[str, list[AuditItem]], n_variants: int) -> set[str]:
    """Items already measured: in a sound merged readings.parquet, or in a sound part of the plan."""
    done: set[str] = set()
    merged = out / READINGS
    if merged.is_file():
        why = rundir.verify_part(merged, schema=SCHEMA)
        if why is None:
            ids = pq.read_table(merged, columns=["item_id"]).column("item_id").to_pylist()
            done |= {k for k in set(ids) if ids.count(k) == n_variants}
        else:
            rundir.set_aside(out, merged, why, redo="its items are measured again")
    rows = {key: len(chunk) * n_variants for key, chunk in chunks.items()}
    for key in parts.verified(list(rows), rows=rows.get, redo=lambda k: f"the items of {k} are measured again"):
        done |= {i.id for i in chunks[key]}
    return done


def _check_audit_inputs(
    items: str | Path | None, preset: str | None, data: str | None, limit: int | None, instruct: bool, max_new_tokens: int, floor: float
) -> None:
    """One line for an audit input that cannot be right, before anything is read."""
    if bool(items) == bool(preset or data):
        raise UserError("give exactly one of --items FILE or --preset NAME (or --data SPEC alone: audit items from mmlu:, mmlu-pro:)")
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}")
    if not instruct and preset != "ptrue":
        raise UserError("--no-instruct applies to --preset ptrue only")
    if max_new_tokens < 1:
        raise UserError("--max-new-tokens must be at least 1")
    if not 0 < floor <= 1:
        raise UserError("--floor must be in (0, 1]")


def _preset_items(
    preset: str, data: str | None, *, note: str, limit: int | None, instruct: bool, run_options: tuple[str, ...] | None, stem: str | None
) -> tuple[list[AuditItem], str | None, str, str]:
    """A preset's items (shipped fixtures, or records from ``data``), the stem they are read with,
    their source and the audit's name."""
    from sleight.readout.audit.presets import preset_defaults, preset_items
    from sleight.readout.audit.sources import load_source_described

    records, described = load_source_described(data, limit=limit, preset=preset) if data else (None, "shipped fixtures")
    found = preset_items(preset, records, note=note, limit=limit if records is None else None, instruct=instruct)
    if run_options is not None:
        found = [replace(i, options=run_options) for i in found]
    if stem is not None:  # --stem: the user's stem wins over the preset's per-item stem (issue #19)
        found = [replace(i, stem=stem or None) for i in found]
    stem = stem if stem is not None else preset_defaults(preset)["stem"]
    return found, stem, f"preset {preset} ({described})", preset


def _data_items(data: str, limit: int | None) -> tuple[list[AuditItem], str, str]:
    """Audit items from the paper's data (sleight.readout.data), no preset: items, source, name."""
    from sleight.readout.audit.items import items_from_records
    from sleight.readout.audit.sources import load_source_described
    from sleight.readout.data import is_data_spec

    if not is_data_spec(data):
        raise UserError(f"--data '{data}' without --preset: only the paper's data specs (mmlu:FILE, mmlu-pro:FILE) give audit items")
    recs, described = load_source_described(data, limit=limit)
    found = items_from_records((r, f"{data} item {k + 1}") for k, r in enumerate(recs))
    return found, described, data.partition(":")[0]


def _file_items(items: str | Path | None, *, lm_eval_chat: bool, limit: int | None, stem: str | None) -> tuple[list[AuditItem], str, str]:
    """Items from a .jsonl/.csv items file or an lm-evaluation-harness task .yaml: items, source, name."""
    from sleight.readout.audit.loading import load_items

    path = Path(str(items))
    if path.suffix.lower() in (".yaml", ".yml"):
        from sleight.readout.audit.lm_eval import load_lm_eval_task

        found = load_lm_eval_task(path, chat=True if lm_eval_chat else None, limit=limit)
    else:
        found = load_items(path)[:limit] if limit is not None else load_items(path)
    own = [i.id for i in found if i.stem]
    if stem is not None and own:
        raise UserError(f"--stem given but {len(own)} item(s) carry their own 'stem' (first: {own[0]}): drop one of the two")
    return found, str(path), path.stem


def load_audit(
    *,
    items: str | Path | None = None,
    preset: str | None = None,
    data: str | None = None,
    note: str = "mixed",
    limit: int | None = None,
    lm_eval_chat: bool = False,
    instruct: bool = True,
    options: str | None = None,
    stem: str | None = None,
    variants: str = "all",
    max_new_tokens: int = 16,
    floor: float = MASS_FLOOR,
    rows_per_pass: int = DEFAULT_ROWS_PER_PASS,
) -> tuple[list[AuditItem], AuditConfig, str]:
    """Validated items, the audit's config and its short name, from ``sleight readout audit``'s inputs
    (no model needed: a bad input is one line before anything loads).

    Give exactly one of ``items`` (a .jsonl/.csv items file or an lm-evaluation-harness task .yaml)
    or ``preset`` (``forecast``, ``ptrue``, ``grade``: shipped fixtures, or records from ``data``).
    ``options`` is the run-level option list (``"10,30,50"`` or a JSON list)."""
    from sleight.readout.audit.items import parse_options, resolve_options
    from sleight.readout.audit.variants import parse_variants

    _check_audit_inputs(items, preset, data, limit, instruct, max_new_tokens, floor)
    run_options = parse_options(options) if options is not None else None
    if preset:
        found, stem, source, name = _preset_items(preset, data, note=note, limit=limit, instruct=instruct, run_options=run_options, stem=stem)
    elif data:  # audit items from the paper's data (sleight.readout.data), no preset
        found, source, name = _data_items(data, limit)
    else:
        found, source, name = _file_items(items, lm_eval_chat=lm_eval_chat, limit=limit, stem=stem)
    found = resolve_options(found, run_options)
    config = AuditConfig(
        source=source,
        preset=preset,
        options=run_options,
        stem=stem or None,
        variants=parse_variants(variants),
        max_new_tokens=max_new_tokens,
        floor=floor,
        rows_per_pass=max(1, rows_per_pass),
    )
    return found, config, name


def rerender(out_dir: str | Path, *, floor: float | None = None) -> AuditResult:
    """summary.json and both reports again from an audit directory's readings (``floor``: the
    audit's own unless given)."""
    out = Path(out_dir)
    if not out.is_dir():
        raise UserError(f"audit directory not found: {out}")
    return finalise(out, floor=_old_summary(out).floor if floor is None else floor)


def _old_summary(out: Path) -> AuditSummary:
    """The summary.json already in ``out`` (an empty one when there is none or it is damaged)."""
    try:
        return AuditSummary.from_json(json.loads((out / "summary.json").read_text()))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return AuditSummary()


def run_audit(
    model: LanguageModel,
    items: Sequence[AuditItem],
    out_dir: str | Path,
    config: AuditConfig,
    *,
    overwrite: bool = False,
    show_progress: bool = True,
) -> AuditResult:
    """Measure every (item, variant) into ``out_dir`` (resumable), then summarise and report."""
    out = Path(out_dir)
    config.n_items = len(items)
    cfg = run_config(items, config)
    run = RunDir(out, "audit", identity_keys=IDENTITY_KEYS)
    run.check(cfg, overwrite=overwrite)
    session = run.open(cfg, model.info.as_dict(), units=len(items), extra={"item_ids": [i.id for i in items]})
    parts = run.parts(PARTS, SCHEMA)
    size = max(1, config.chunk_items)
    chunks = {f"part-{k:06d}": list(items[k : k + size]) for k in range(0, len(items), size)}  # fixed: the same on resume
    done = _done_ids(out, parts, chunks, len(config.variants))
    todo = {key: chunk for key, chunk in chunks.items() if not all(i.id in done for i in chunk)}
    prog = SweepProgress(len(items), initial=len(items) - sum(len(c) for c in todo.values()), unit="item", desc="readout audit", enabled=show_progress, tokens=False)
    completed = False
    try:
        for key, chunk in todo.items():
            prog.start_item(key, None)
            rows = measure(model, chunk, config.variants, stem=config.stem, max_new_tokens=config.max_new_tokens, rows_per_pass=config.rows_per_pass)
            parts.write(key, rows_to_table(rows), tmp_dir=session.tmp_dir)
            session.committed(len(chunk))
            prog.finish_item(len(chunk))
        completed = True
    finally:
        prog.close()
        session.finish(completed)

    ptrue = _ptrue_section(model, items, out, config) if config.preset == "ptrue" else None
    return finalise(out, items_order=[i.id for i in items], floor=config.floor, ptrue=ptrue)


class ConstructedPair(TypedDict):
    """One (question, answer, label) pair of ``readout ptrue``'s constructed setting, handed to its
    scorer as it is (:func:`sleight.readout.ptrue.pipeline.score_pair_rows`)."""

    setting: str
    item_id: str
    question: str
    deleted_question: str | None  # the item's instruction deleted (the paper's Deleted)
    answer: str
    answer_source: str  # gold | wrong
    label: float | None
    matched: bool | None


def ptrue_pairs(items: Sequence[AuditItem]) -> list[ConstructedPair]:
    """The ptrue preset's items as the (question, answer, label) pairs of ``readout ptrue``'s
    constructed setting: ``<id>:true`` is the gold answer, ``<id>:false`` the wrong one."""
    pairs = []
    for i in items:
        base, _, tag = i.id.rpartition(":")
        pairs.append(
            ConstructedPair(
                setting="constructed",
                item_id=base or i.id,
                question=str(i.meta.get("question_text", i.question or "")),
                deleted_question=i.meta.get("deleted_question"),
                answer=str(i.meta.get("answer", "")),
                answer_source="wrong" if tag == "false" else "gold",
                label=i.target,
                matched=None,
            )
        )
    return pairs


def _ptrue_section(model: LanguageModel, items: Sequence[AuditItem], out: Path, config: AuditConfig) -> PTrueSection:
    """The P(True) readouts of the ptrue preset, recorded as ``readout ptrue`` records them
    (ptrue.parquet: one row per (pair, readout)) and summarised the same way."""
    from sleight.readout.audit.ptrue_table import PTRUE_SCHEMA
    from sleight.readout.ptrue.pipeline import score_pair_rows
    from sleight.readout.ptrue.pipeline import summarise as ptrue_summary
    from sleight.stats.downstream import clean

    path = out / "ptrue.parquet"
    instruct = all(i.chat_template for i in items)
    if path.exists():
        rows = pq.read_table(path).to_pylist()
    else:
        rows = score_pair_rows(model, ptrue_pairs(items), instruct=instruct, continuation_tokens=config.max_new_tokens)
        rundir.write_table(path, pa.Table.from_pylist([{k: r.get(k) for k in PTRUE_SCHEMA.names} for r in rows], schema=PTRUE_SCHEMA))
        rows = pq.read_table(path).to_pylist()  # the recorded rows, as a resumed run reads them
    constructed = ptrue_summary(rows).settings.get("constructed")
    return PTrueSection(instruct, {} if constructed is None else clean(constructed))  # its JSON, as the audit keeps it


def load_readings(out_dir: str | Path) -> pd.DataFrame:
    """readings.parquet of an audit directory, and the rows of its parts if it never finished (a
    damaged file is one line naming it)."""
    out = Path(out_dir)
    hint = f"run 'sleight readout audit --out {out}' again to measure its items again"
    tables = []
    path = out / READINGS
    if path.exists():
        why = rundir.verify_part(path, schema=SCHEMA)
        if why is not None:
            raise UserError(f"{path} is damaged ({why}); {hint}")
        tables.append(pq.read_table(path, schema=SCHEMA))
    parts = rundir.Parts(out, PARTS, SCHEMA)
    if parts.keys():
        tables.append(parts.read(hint=hint))
    if not tables:
        raise UserError(f"{out} has no readings (run 'sleight readout audit --out {out}' first)")
    return pa.concat_tables(tables).to_pandas()


def finalise(out_dir: str | Path, *, items_order: Sequence[str] | None = None, floor: float = MASS_FLOOR, ptrue: PTrueSection | None = None) -> AuditResult:
    """Merge parts into readings.parquet, write summary.json and both reports. ``ptrue``: the ptrue
    preset's section, measured now; without it an earlier summary.json's section is kept (the
    readings alone cannot give it back)."""
    out = Path(out_dir)
    df = load_readings(out)
    manifest = cast(AuditManifest, RunDir(out, "audit").read_manifest() or {})  # the JSON this run (or an older one) wrote
    order = list(items_order or manifest.get("item_ids") or dict.fromkeys(df["item_id"]))
    variants = list((manifest.get("config") or AuditRunConfig()).get("variants") or dict.fromkeys(df["variant"]))
    rank_i = {k: n for n, k in enumerate(order)}
    rank_v = {k: n for n, k in enumerate(variants)}
    df = df.assign(_i=df["item_id"].map(rank_i), _v=df["variant"].map(rank_v)).sort_values(["_i", "_v"], kind="stable").drop(columns=["_i", "_v"])
    df = df.drop_duplicates(["item_id", "variant"], keep="last").reset_index(drop=True)
    rundir.write_table(out / READINGS, pa.Table.from_pandas(df, schema=SCHEMA, preserve_index=False), schema=SCHEMA)
    rundir.Parts(out, PARTS, SCHEMA).remove()
    summary = replace(summarise(df, floor), ptrue=ptrue or _old_summary(out).ptrue)
    checks = run_checks(df, summary, floor)
    summary = replace(summary, checks=tuple(c.outcome() for c in checks))
    rundir.write_json(out / "summary.json", summary.as_json())
    from sleight.readout.audit.judge import lines_to_html
    from sleight.readout.audit.judge_store import section_lines

    jury = section_lines(out)  # the jury's classes, once 'sleight readout judge' has run
    md, page = write_reports(out, manifest, summary, checks, extra_md=jury, extra_html=lines_to_html(jury))
    return AuditResult(out, summary, checks, {"readings": out / "readings.parquet", "summary": out / "summary.json", "report_md": md, "report_html": page})
