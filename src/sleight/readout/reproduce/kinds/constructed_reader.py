"""``constructed-reader`` runs: Table 7 (App. C.7) -- the forecast pipeline's note-only reader on
constructed notes, half stating the answer and half about an unrelated passage
(:mod:`sleight.readout.forecast.constructed`), read against the spaced and the unspaced letters --
and App. B's count of rows whose forecast prompt has the reader task's argmax (``same_argmax``).

The run is a :mod:`sleight.rundir` run directory of its own kind: its readings (one row per item
and spacing) are written once the pass finishes; a finished run is only re-read, a killed one
starts its single pass again, and a directory made with other data is refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sleight import rundir
from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, single_pass

KIND = "constructed-reader"
SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("note_kind", pa.string()),
        ("spacing", pa.string()),
        ("mass", pa.float64()),
        ("argmax_on_option", pa.float64()),
        ("choice", pa.string()),
        ("correct", pa.float64()),
        ("agree", pa.float64()),
        ("argmax_id", pa.int64()),
        ("forecast_argmax_id", pa.int64()),
        ("same_argmax", pa.float64()),
    ]
)


def constructed_rows(ctx: RunContext) -> Rows:
    from sleight.readout.data import race_items
    from sleight.readout.forecast.constructed import read_constructed

    ds, items = race_items(ctx.data, ctx.limit)
    records = ds.view("forecast", ctx.limit)
    config = {"data": ctx.data, "limit": ctx.limit, "items_sha256": rundir.digest(records), "reads": "reader, forecast"}  # App. B: both prompts

    def compute() -> Rows:
        return [dict(r) for r in read_constructed(ctx.model(), items, records)]

    return single_pass(ctx, KIND, config, SCHEMA, len(items), compute, lambda: ctx.model().info.as_dict())


def _values() -> dict[str, tuple[str, ...]]:
    from sleight.readout.forecast.constructed import SPACING_NAMES

    return {"spacing": SPACING_NAMES, "note_kind": ("constructed", "unrelated")}


def _per_item(_s: Mapping[str, Any]) -> tuple[int, int]:
    return 2, 0  # one reader context (both option sets read at its position) and the forecast prompt (App. B)


KINDS = (
    RunKind(
        KIND,
        fields=lambda: (),
        columns=lambda: tuple(SCHEMA.names),
        values=_values,
        families=lambda _s: ("race-h",),
        per_item=_per_item,
        rows=constructed_rows,
        context_tokens=250,
    ),
)
