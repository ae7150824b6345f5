"""One entry point for an items file of any kind: JSONL, CSV or an lm-evaluation-harness task YAML.

It sits above both :mod:`.items` (the JSONL/CSV records) and :mod:`.lm_eval` (which builds its items
with :mod:`.items`), so neither imports the other's loader.
"""

from __future__ import annotations

from pathlib import Path

from sleight.readout.audit.items import AuditItem, items_from_records, load_csv_records
from sleight.readout.items import load_jsonl_records


def load_items(path: str | Path) -> list[AuditItem]:
    """Items from a ``.jsonl``, ``.csv`` or lm-eval task ``.yaml`` file, validated (no model needed)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".yaml", ".yml"):
        from sleight.readout.audit.lm_eval import load_lm_eval_task

        return load_lm_eval_task(p)
    if suffix == ".csv":
        return items_from_records(load_csv_records(p))
    return items_from_records(load_jsonl_records(p))
