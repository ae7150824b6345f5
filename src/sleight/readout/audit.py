"""Running an audit into a directory that survives a crash, and re-rendering it.

Layout of an audit directory::

    manifest.json     config, model record, fingerprint of (items, config, model)
    parts/            one Parquet file per finished chunk of items (removed once merged)
    readings.parquet  one row per (item, variant), the public schema (measure.SCHEMA)
    summary.json      per-variant numbers (checks.summarise), plus P(True) readouts for that preset
    report.md/.html   the six checks with verdicts, evidence and worked examples; the variant table
    ptrue.parquet     (ptrue preset only) the five P(True) readouts per item

A killed run restarts where it stopped: items already in ``parts/`` are not measured again, and a
directory holding a different audit is refused rather than mixed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sleight.errors import UserError
from sleight.readout.batching import DEFAULT_ROWS_PER_PASS
from sleight.readout.checks import MASS_FLOOR, Check, run_checks, summarise
from sleight.readout.items import AuditItem
from sleight.readout.measure import SCHEMA, measure, rows_to_table
from sleight.readout.report import dumps, write_reports
from sleight.readout.variants import VARIANTS


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

    def readings_key(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("floor", "rows_per_pass", "chunk_items", "n_items", "source"):
            d.pop(k)
        return d


@dataclass
class AuditResult:
    out_dir: Path
    summary: dict[str, Any]
    checks: list[Check]
    files: dict[str, Path] = field(default_factory=dict)


def fingerprint(items: Sequence[AuditItem], config: AuditConfig, model_info: dict[str, Any]) -> str:
    """Hash of what determines the readings: items, options, stem, variants, budget, model."""
    model_key = {k: model_info.get(k) for k in ("model_id", "revision", "chat_template_sha256", "engine", "dtype")}
    payload = json.dumps(
        {"items": [asdict(i) for i in items], "config": config.readings_key(), "model": model_key},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def _done_ids(out: Path) -> set[str]:
    done: set[str] = set()
    for part in sorted((out / "parts").glob("part-*.parquet")):
        done |= set(pq.read_table(part, columns=["item_id"]).column("item_id").to_pylist())
    return done


def _write_parquet(table: pa.Table, path: Path) -> None:
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def prepare_dir(out: Path, fp: str, manifest: dict[str, Any], overwrite: bool) -> None:
    """Create the directory, or resume it if it holds the same audit; refuse a different one."""
    mpath = out / "manifest.json"
    if mpath.exists():
        try:
            old = json.loads(mpath.read_text())
        except ValueError:
            old = {}
        if old.get("fingerprint") != fp:
            if not overwrite:
                raise UserError(f"{out} holds a different audit (other items, options, stem, variants or model): pass another --out, or --overwrite")
            for name in ("parts", "readings.parquet", "summary.json", "report.md", "report.html", "ptrue.parquet"):
                p = out / name
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "parts").mkdir(exist_ok=True)
    tmp = mpath.with_suffix(".json.tmp")
    tmp.write_text(dumps(manifest))
    tmp.replace(mpath)


def run_audit(
    model,
    items: Sequence[AuditItem],
    out_dir: str | Path,
    config: AuditConfig,
    *,
    overwrite: bool = False,
    show_progress: bool = True,
) -> AuditResult:
    """Measure every (item, variant) into ``out_dir`` (resumable), then summarise and report."""
    from tqdm.auto import tqdm

    out = Path(out_dir)
    config.n_items = len(items)
    fp = fingerprint(items, config, model.info.as_dict())
    manifest = {
        "tool": "sleight readout audit",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "fingerprint": fp,
        "model": model.info.as_dict(),
        "config": {**asdict(config), "options": list(config.options) if config.options else None, "variants": list(config.variants)},
        "item_ids": [i.id for i in items],
    }
    prepare_dir(out, fp, manifest, overwrite)
    readings_path = out / "readings.parquet"
    done = _done_ids(out)
    if readings_path.exists():
        done |= set(pq.read_table(readings_path, columns=["item_id"]).column("item_id").to_pylist())
    todo = [i for i in items if i.id not in done]
    index = {i.id: k for k, i in enumerate(items)}
    bar = tqdm(total=len(items), initial=len(items) - len(todo), unit="item", desc="readout audit", disable=not show_progress)
    try:
        for start in range(0, len(todo), max(1, config.chunk_items)):
            chunk = todo[start : start + config.chunk_items]
            rows = measure(model, chunk, config.variants, stem=config.stem, max_new_tokens=config.max_new_tokens, rows_per_pass=config.rows_per_pass)
            _write_parquet(rows_to_table(rows), out / "parts" / f"part-{index[chunk[0].id]:06d}.parquet")
            bar.update(len(chunk))
    finally:
        bar.close()

    extra: dict[str, Any] = {}
    if config.preset == "ptrue":
        extra["ptrue"] = _ptrue_section(model, items, out)
    return finalise(out, items_order=[i.id for i in items], floor=config.floor, extra=extra)


def _ptrue_section(model, items: Sequence[AuditItem], out: Path) -> dict[str, Any]:
    """The five P(True) readouts per item (ptrue preset), saved and summarised."""
    from sleight.readout.checks import downstream
    from sleight.readout.ptrue import READOUTS, ptrue_readouts

    path = out / "ptrue.parquet"
    if path.exists():
        df = pq.read_table(path).to_pandas()
    else:
        qs = [str(i.meta.get("question_text", i.question or "")) for i in items]
        ans = [str(i.meta.get("answer", "")) for i in items]
        vals = ptrue_readouts(model, qs, ans)
        df = pd.DataFrame({"item_id": [i.id for i in items], "target": [i.target for i in items], **vals})
        _write_parquet(pa.Table.from_pandas(df, preserve_index=False), path)
    section: dict[str, Any] = {}
    for name in ("library_logprob", *READOUTS):
        col = df[name].astype(float)
        section[name] = {
            "mean": float(np.nanmean(col)) if col.notna().any() else None,
            "downstream": downstream(col.tolist(), df["target"].tolist()),
        }
    return section


def load_readings(out_dir: str | Path) -> pd.DataFrame:
    """readings.parquet of an audit directory (or its parts, if it never finished)."""
    out = Path(out_dir)
    path = out / "readings.parquet"
    if path.exists():
        return pq.read_table(path).to_pandas()
    parts = sorted((out / "parts").glob("part-*.parquet")) if (out / "parts").is_dir() else []
    if not parts:
        raise UserError(f"{out} has no readings (run 'sleight readout audit --out {out}' first)")
    return pa.concat_tables([pq.read_table(p, schema=SCHEMA) for p in parts]).to_pandas()


def finalise(out_dir: str | Path, *, items_order: Sequence[str] | None = None, floor: float = MASS_FLOOR, extra: dict[str, Any] | None = None) -> AuditResult:
    """Merge parts into readings.parquet, write summary.json and both reports."""
    out = Path(out_dir)
    df = load_readings(out)
    manifest = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else {}
    order = list(items_order or manifest.get("item_ids") or dict.fromkeys(df["item_id"]))
    variants = list((manifest.get("config") or {}).get("variants") or dict.fromkeys(df["variant"]))
    rank_i = {k: n for n, k in enumerate(order)}
    rank_v = {k: n for n, k in enumerate(variants)}
    df = df.assign(_i=df["item_id"].map(rank_i), _v=df["variant"].map(rank_v)).sort_values(["_i", "_v"], kind="stable").drop(columns=["_i", "_v"])
    df = df.drop_duplicates(["item_id", "variant"], keep="last").reset_index(drop=True)
    _write_parquet(pa.Table.from_pandas(df, schema=SCHEMA, preserve_index=False), out / "readings.parquet")
    if (out / "parts").is_dir():
        shutil.rmtree(out / "parts")
    summary = summarise(df, floor)
    old = {}
    if (out / "summary.json").exists():
        try:
            old = json.loads((out / "summary.json").read_text())
        except ValueError:
            old = {}
    for key in ("ptrue",):
        if extra and key in extra:
            summary[key] = extra[key]
        elif key in old:
            summary[key] = old[key]
    checks = run_checks(df, summary, floor)
    summary["checks"] = [{"number": c.number, "name": c.name, "verdict": c.verdict, "reason": c.reason} for c in checks]
    (out / "summary.json").write_text(dumps(summary))
    md, page = write_reports(out, manifest, summary, checks)
    return AuditResult(out, summary, checks, {"readings": out / "readings.parquet", "summary": out / "summary.json", "report_md": md, "report_html": page})
