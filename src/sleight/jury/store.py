"""Keyed, append-safe vote storage: a folder of Parquet parts, one row per key once compacted.

Each batch of votes is committed atomically (:func:`sleight.rundir.write_table`: a private
temporary file, fsync, rename), so a killed judge loses at most the batch in flight and a reader
(pandas, pyarrow, DuckDB ``read_parquet('<folder>/*.parquet')``) never sees half a part. A vote
asked again (after a transport error) is appended; :func:`compact` then rewrites the folder so that
it holds exactly one row per key, the newest -- the compacted part is committed before the old
parts are removed, and readers keep the newest row per key in the meantime. A damaged part is a
one-line error for a reader; the judge (``repair``) moves it aside and asks its votes again.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sleight import rundir
from sleight.errors import UserError


def write_atomic(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` atomically."""
    rundir.write_table(path, table)


def write_text_atomic(text: str, path: Path) -> None:
    rundir.write_text(path, text)


def _part_name() -> str:
    return f"part-{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"


def parts(folder: Path) -> list[Path]:
    """The committed parts, oldest first (names sort by commit time)."""
    folder = Path(folder)
    return sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []


def append(folder: Path, schema: pa.Schema, rows: Sequence[Mapping[str, Any]]) -> Path | None:
    """Commit one batch of rows as a new part; returns its path (``None`` for an empty batch)."""
    if not rows:
        return None
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / _part_name()
    write_atomic(rundir.table_from_rows(rows, schema), path)
    return path


def _sound(folder: Path, repair: bool, hint: str = "") -> list[Path]:
    """The parts whose footer reads and that hold rows. A damaged one is a one-line error, or with
    ``repair`` is moved to the run's ``damaged/`` folder (its votes are then asked again)."""
    good = []
    for p in parts(folder):
        why = rundir.verify_part(p)
        if why is None:
            good.append(p)
        elif repair:
            rundir.set_aside(Path(folder).parent, p, why, redo="its votes are asked again")
        else:
            raise UserError(f"{p} is damaged ({why}){'; ' + hint if hint else ''}")
    return good


def load_all(folder: Path, schema: pa.Schema, *, repair: bool = False, hint: str = "") -> pd.DataFrame:
    """Every stored row, superseded ones included, in commit order (older parts read with nulls
    for the columns they predate)."""
    found = _sound(folder, repair, hint)
    if not found:
        return schema.empty_table().to_pandas()
    return pa.concat_tables([pq.read_table(p, schema=schema) for p in found]).to_pandas()


def load(folder: Path, schema: pa.Schema, key: Sequence[str], *, repair: bool = False, hint: str = "") -> pd.DataFrame:
    """One row per key: the newest committed one."""
    df = load_all(folder, schema, repair=repair, hint=hint)
    return df.drop_duplicates(list(key), keep="last").reset_index(drop=True)


def compact(folder: Path, schema: pa.Schema, key: Sequence[str]) -> int:
    """Rewrite the folder as one part holding one row per key; returns the superseded rows dropped.

    Nothing is rewritten when no key has a superseded row.
    """
    old = parts(folder)
    if not old:
        return 0
    every = load_all(folder, schema)
    latest = every.drop_duplicates(list(key), keep="last")
    dropped = len(every) - len(latest)
    if dropped == 0:
        return 0
    table = pa.Table.from_pandas(latest.reset_index(drop=True), schema=schema, preserve_index=False)
    write_atomic(table, Path(folder) / _part_name())  # sorts after every old part: it wins meanwhile
    for p in old:
        p.unlink(missing_ok=True)
    return dropped
