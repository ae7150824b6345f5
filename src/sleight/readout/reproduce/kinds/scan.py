"""``scan`` runs: the published-scorer scan's own run directory (:func:`~sleight.readout.scan.run.run_scan`),
with the paper's data filled into each preset -- Table 11's four specifications on RACE-H items
(App. F), App. G's four G-Eval dimensions on SummEval. Resumed preset by preset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, setting_int

FIELDS = ("presets", "max_new_tokens")


def scan_rows(ctx: RunContext) -> Rows:
    from sleight.readout.scan.run import ScanConfig, run_scan

    s = ctx.spec.settings
    config = ScanConfig(presets=tuple(s["presets"]), limit=ctx.limit, max_new_tokens=int(s.get("max_new_tokens", 16)), data=ctx.data)
    return [dict(r) for r in run_scan(ctx.model, ctx.run_dir, config, show_progress=ctx.progress, B=ctx.B).readings]


def _columns() -> tuple[str, ...]:
    from sleight.readout.scan.run import SCAN_SCHEMA

    return tuple(SCAN_SCHEMA.names)


def _values() -> dict[str, tuple[str, ...]]:
    from sleight.readout.scan.scorers import GEVAL_DIMENSIONS, SCORERS

    return {"preset": (*SCORERS, *(f"geval:{d}" for d in GEVAL_DIMENSIONS))}


def _check(s: Mapping[str, Any]) -> str | None:
    presets = s.get("presets")
    if not isinstance(presets, list) or not presets:
        return "presets: expected a non-empty list of scorer presets"
    known = _values()["preset"]
    bad = [p for p in presets if p not in known]
    return f"presets: {', '.join(map(str, bad))} not among {', '.join(known)}" if bad else None


def _per_item(s: Mapping[str, Any]) -> tuple[int, int]:
    n = len(s.get("presets") or [1])
    # per preset: the audit's original and spaced contexts, the option read, the repaired position
    return 4 * n, 2 * n * setting_int(s, "max_new_tokens", 16)


KINDS = (
    RunKind(
        "scan",
        fields=lambda: FIELDS,
        columns=_columns,
        values=_values,
        families=lambda _s: ("race-h", "summeval"),
        per_item=_per_item,
        rows=scan_rows,
        check=_check,
        target="human",
        unit="doc_id",
        pair=("preset", "item_id"),
        context_tokens=700,
    ),
)
