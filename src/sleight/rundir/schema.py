"""Schema docs: Markdown tables generated from the schema objects and field tables, so the docs
cannot drift; and :class:`JsonFields`, a summary dataclass whose JSON form is its fields by name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Self

import pyarrow as pa


def schema_markdown(schema: pa.Schema, notes: Mapping[str, str] | None = None) -> str:
    """A Markdown table of a Parquet schema: column, Arrow type, and a note (for docs/rundir.md and
    the docs site; generated from the ``pa.schema`` objects, so the docs cannot drift)."""
    notes = dict(notes or {})
    for f in schema:
        if f.metadata and b"doc" in f.metadata and f.name not in notes:
            notes[f.name] = f.metadata[b"doc"].decode()
    lines = ["| column | type | note |", "|---|---|---|"]
    for f in schema:
        note = notes.get(f.name, "").replace("|", "\\|")
        lines.append(f"| `{f.name}` | `{f.type}` | {note} |")
    return "\n".join(lines) + "\n"


def fields_markdown(fields: Mapping[str, str]) -> str:
    """A Markdown table of named fields (the manifest's and a session record's)."""
    lines = ["| field | meaning |", "|---|---|"]
    lines += [f"| `{k}` | {v.replace('|', chr(92) + '|')} |" for k, v in fields.items()]
    return "\n".join(lines) + "\n"


class JsonFields:
    """A summary dataclass whose JSON form is its fields by name: ``as_json`` writes them,
    ``from_json`` reads them back from a record that may hold other keys too (a run description)."""

    def as_json(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Self:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})  # type: ignore[arg-type]
