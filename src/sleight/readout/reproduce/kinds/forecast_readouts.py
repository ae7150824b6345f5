"""``forecast-readouts``: App. H's readouts (a)-(h) of one checkpoint (Table 13)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sleight import rundir
from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind
from sleight.readout.reproduce.kinds.downstream import _fields, downstream_rows, forecast_per_item

READOUTS_JSON = "forecast_readouts.json"
# one readout of one passage; ``mass``: its option mass where the readout reads a position (App. H prints
# medians), ``grid_found``: (f) only, whether the continuation writes a grid number (App. H counts them)
READOUT_ROW = ("item_id", "cluster", "readout", "score", "correct", "mass", "grid_found")


def readout_rows(ctx: RunContext) -> Rows:
    """The forecast run (resumed as the command's), then the extra readouts on its notes -- T1 and
    its stem "Estimate: " (App. I), the deleted instruction, the short stems, the generated number
    -- kept in ``forecast_readouts.json`` beside it; one row per (passage, readout)."""
    from sleight.readout.data import race_items
    from sleight.readout.forecast.readouts import READOUTS, T1_STEM, T1_TEMPLATE, extra_readouts

    rows = downstream_rows("forecast", ctx)
    path = ctx.run_dir / READOUTS_JSON
    key = {"data": ctx.data, "limit": ctx.limit, "template": T1_TEMPLATE, "stem": T1_STEM, "n_rows": len(rows), "masses": True}
    cached = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    if cached and cached.get("key") == key:
        records = cached["records"]
    else:
        _ds, items = race_items(ctx.data, ctx.limit)
        records = extra_readouts(ctx.model(), items, rows, template=T1_TEMPLATE, stem=T1_STEM)
        rundir.write_json(path, {"key": key, "records": records})
    return [
        {
            "item_id": r["item_id"], "cluster": r["cluster"], "readout": k, "score": r.get(k), "correct": r.get("correct"),
            "mass": (r.get("masses") or {}).get(k), "grid_found": _grid_found(r) if k == "continuation" else None,
        }
        for r in records
        for k in READOUTS
    ]


def _grid_found(record: Mapping[str, Any]) -> bool:
    """Whether readout (f)'s continuation writes a grid value (else (f) is 0.5 with nothing written)."""
    from sleight.readout.audit.presets import FORECAST_OPTIONS
    from sleight.readout.scan.text_parsers import first_grid_value

    return first_grid_value(record.get("continuation_text") or "", FORECAST_OPTIONS) is not None


def _per_item(s: Mapping[str, Any]) -> tuple[int, int]:
    c, d = forecast_per_item(s)
    return c + 5, d  # (c), (d), (e), (g), (h): five more contexts


def _values() -> dict[str, tuple[str, ...]]:
    from sleight.readout.forecast.readouts import READOUTS

    return {"readout": tuple(READOUTS)}


KINDS = (
    RunKind(
        "forecast-readouts",
        fields=lambda: _fields("forecast"),
        columns=lambda: READOUT_ROW,
        values=_values,
        families=lambda _s: ("race-h",),
        per_item=_per_item,
        rows=readout_rows,
        unit="cluster",
        context_tokens=600,
    ),
)
