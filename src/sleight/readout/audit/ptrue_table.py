"""The columns of ``ptrue.parquet``: one row per (setting, question, readout), as ``sleight readout
ptrue`` and ``sleight readout audit --preset ptrue`` both write it (the same rows, in this one schema).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from sleight.readout.audit.measure import SCHEMA as MEASURE_SCHEMA
from sleight.readout.ptrue.readouts import POSITION_KEYS


def _measured(names: Sequence[str]) -> list[pa.Field]:
    """The audit's own column types for the readings a pipeline copies from its measurement."""
    return [MEASURE_SCHEMA.field(n) for n in names]


_F64_LIST = pa.list_(pa.float64())

PTRUE_READING_COLUMNS = (
    "context",
    "context_tail",
    "n_context_tokens",
    "ends_with_whitespace",
    "options",
    *POSITION_KEYS,
    "continuation",
    "continuation_class",
)

PTRUE_SCHEMA = pa.schema(
    [
        ("setting", pa.string()),
        ("item_id", pa.string()),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("answer_source", pa.string()),
        ("label", pa.float64()),
        ("matched", pa.string()),
        ("answer_tokens", pa.int64()),
        ("answer_finish", pa.string()),
        ("label_library", pa.float64()),
        ("fused_letter", pa.bool_()),
        ("label_fused", pa.float64()),
        ("readout", pa.string()),
        ("score", pa.float64()),
        ("library_prob", pa.float64()),
        *_measured(PTRUE_READING_COLUMNS),
    ]
)
