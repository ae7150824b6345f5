"""Atomic file writes, JSON and Parquet tables: the only code in sleight that writes a file.

Every write goes to a private temporary file, is fsynced and renamed into place (and the folder
fsynced), so a reader sees a file whole or not at all. JSON is dumped JSON-safe (:func:`dumps`:
NaN and infinities as null, numpy values as Python ones).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sleight.errors import UserError

PARQUET_COMPRESSION = "zstd"


def now() -> str:
    """UTC now, ISO 8601 to the second."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------------
# JSON
# ------------------------------------------------------------------------------------------------


def json_safe(obj: Any) -> Any:
    """Plain JSON values: NaN and infinities become null, numpy scalars and arrays Python values,
    tuples and sets lists, dict keys strings, paths strings."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [json_safe(v) for v in sorted(obj, key=str)]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item):
        try:
            return json_safe(obj.item())
        except (TypeError, ValueError):
            pass
    if hasattr(obj, "tolist"):
        return json_safe(obj.tolist())
    return obj


def dumps(obj: Any, *, indent: int | None = 2) -> str:
    """JSON text of :func:`json_safe` ``obj`` (unknown objects as their ``str``), UTF-8 kept."""
    return json.dumps(json_safe(obj), indent=indent, ensure_ascii=False, allow_nan=False, default=str)


def read_json(path: Path | str, what: str = "") -> dict[str, Any]:
    """A JSON object from a file; a damaged one is a one-line :class:`UserError`."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{p} is not valid JSON ({exc}){'; ' + what if what else ''}") from None
    if not isinstance(data, dict):
        raise UserError(f"{p} does not hold a JSON object{'; ' + what if what else ''}")
    return data


# ------------------------------------------------------------------------------------------------
# atomic writes
# ------------------------------------------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (where the platform lets a folder be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _tmp_path(path: Path, tmp_dir: Path | None) -> Path:
    folder = tmp_dir if tmp_dir is not None else path.parent
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"


def _commit(tmp: Path, path: Path) -> Path:
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return path


def write_bytes(path: Path | str, data: bytes, *, tmp_dir: Path | None = None) -> Path:
    """Write ``data`` to ``path`` atomically: a private temporary file, fsync, rename, fsync of the folder.

    ``tmp_dir`` must be on the same file system as ``path`` (default: ``path``'s folder).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path, tmp_dir)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        return _commit(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path | str, text: str, *, tmp_dir: Path | None = None) -> Path:
    """UTF-8 text, written as :func:`write_bytes` writes."""
    return write_bytes(path, text.encode("utf-8"), tmp_dir=tmp_dir)


def write_json(path: Path | str, obj: Any, *, indent: int | None = 2, tmp_dir: Path | None = None) -> Path:
    """:func:`dumps` of ``obj`` plus a newline, written atomically."""
    return write_text(path, dumps(obj, indent=indent) + "\n", tmp_dir=tmp_dir)


def table_from_rows(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts) as a table of exactly ``schema``; a key the schema lacks is a programming error
    (it would be silently dropped), a missing key is null."""
    names = set(schema.names)
    extra = sorted({k for r in rows for k in r} - names)
    if extra:
        raise ValueError(f"rows carry columns the schema lacks: {', '.join(extra)}")
    return pa.Table.from_pylist([{k: r.get(k) for k in schema.names} for r in rows], schema=schema)


def write_table(path: Path | str, table: pa.Table, *, schema: pa.Schema | None = None, tmp_dir: Path | None = None) -> Path:
    """A Parquet file written atomically (zstd); with ``schema``, the table must have exactly it."""
    path = Path(path)
    if schema is not None and not table.schema.equals(schema):
        table = table.select(schema.names).cast(schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path, tmp_dir)
    try:
        pq.write_table(table, tmp, compression=PARQUET_COMPRESSION)
        return _commit(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
