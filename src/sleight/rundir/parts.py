"""Parts: a folder of Parquet parts, one per committed unit, verified before it is trusted.

A part is sound when its footer is readable, its schema the table's and its row count the expected
one (:func:`verify_part`); a damaged one is moved aside to ``RUN_DIR/damaged/`` with one line naming
it (:func:`set_aside`), never deleted, and its unit is redone.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sleight.errors import UserError
from sleight.rundir.files import write_table

DAMAGED_DIR = "damaged"

Warn = Callable[[str], None]


def _stderr(line: str) -> None:
    print(f"sleight: {line}", file=sys.stderr, flush=True)


def verify_part(path: Path | str, *, schema: pa.Schema | None = None, rows: int | None = None) -> str | None:
    """What is wrong with a Parquet part, or None when it is sound: its footer must be readable,
    it must hold rows (``rows`` of them when given) and, with ``schema``, have that schema."""
    p = Path(path)
    try:
        if p.stat().st_size == 0:
            return "empty file"
        meta = pq.read_metadata(p)
        got = meta.schema.to_arrow_schema()
    except (OSError, pa.ArrowException) as exc:
        return f"unreadable: {str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}"
    if meta.num_rows == 0:
        return "no rows"
    if rows is not None and meta.num_rows != rows:
        return f"{meta.num_rows} rows, expected {rows}"
    if schema is not None and not got.remove_metadata().equals(schema.remove_metadata()):
        return "columns differ from the table's schema"
    return None


def set_aside(run_dir: Path, path: Path, reason: str, *, redo: str = "its work is redone", warn: Warn = _stderr) -> Path | None:
    """Move a damaged file of a run to ``RUN_DIR/damaged/<its folder>/`` (never delete it: it is
    evidence) and say so in one line; None when it was already gone (another session moved it)."""
    rel = path.parent.relative_to(run_dir) if path.parent != run_dir else Path()
    dest_dir = run_dir / DAMAGED_DIR / rel
    dest_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    dest = dest_dir / f"{path.stem}.{stamp}.{uuid.uuid4().hex[:4]}{path.suffix}"
    try:
        os.replace(path, dest)
    except FileNotFoundError:
        return None
    warn(f"{path} is damaged ({reason}); moved it to {dest}; {redo}")
    return dest


class Parts:
    """A folder of Parquet parts (one per committed unit), read by pandas, pyarrow and DuckDB as one
    table (``read_parquet('RUN_DIR/<table>/*.parquet')``)."""

    def __init__(self, run_dir: Path, name: str, schema: pa.Schema) -> None:
        self.run_dir = Path(run_dir)
        self.name = name
        self.dir = self.run_dir / name
        self.schema = schema

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.parquet"

    def keys(self) -> list[str]:
        """Names (without ``.parquet``) of the parts present, sorted; unverified."""
        if not self.dir.is_dir():
            return []
        return sorted(p.name[: -len(".parquet")] for p in self.dir.glob("*.parquet") if not p.name.startswith("."))

    def write(self, key: str, table: pa.Table, *, tmp_dir: Path | None = None) -> Path:
        """Commit one part atomically (``tmp_dir``: the writing session's own folder)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        return write_table(self.path(key), table, schema=self.schema, tmp_dir=tmp_dir)

    def problem(self, key: str, rows: int | None = None) -> str | None:
        return verify_part(self.path(key), schema=self.schema, rows=rows)

    def set_aside(self, key: str, reason: str, *, redo: str = "its work is redone", warn: Warn = _stderr) -> Path | None:
        """Move a damaged part to ``damaged/<table>/`` and say so in one line."""
        return set_aside(self.run_dir, self.path(key), reason, redo=redo, warn=warn)

    def verified(
        self,
        keys: Iterable[str] | None = None,
        rows: Callable[[str], int | None] | None = None,
        *,
        redo: Callable[[str], str] = lambda _k: "its work is redone",
        warn: Warn = _stderr,
    ) -> set[str]:
        """The sound parts among ``keys`` (default: all present); damaged ones are set aside."""
        present = set(self.keys())
        wanted = present if keys is None else present & set(keys)
        good = set()
        for key in sorted(wanted):
            why = self.problem(key, rows(key) if rows else None)
            if why is None:
                good.add(key)
            else:
                self.set_aside(key, why, redo=redo(key), warn=warn)
        return good

    def read(self, keys: Iterable[str] | None = None, *, hint: str = "") -> pa.Table:
        """The parts as one table of :attr:`schema`; a damaged part is a one-line :class:`UserError`
        naming it (a reader never moves anything; the writing command's resume redoes it)."""
        names = self.keys() if keys is None else sorted(keys)
        tables = []
        for key in names:
            why = self.problem(key)
            if why is not None:
                raise UserError(f"{self.path(key)} is damaged ({why}){'; ' + hint if hint else ''}")
            tables.append(pq.read_table(self.path(key), schema=self.schema))
        return pa.concat_tables(tables) if tables else self.schema.empty_table()

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
