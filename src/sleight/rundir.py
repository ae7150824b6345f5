"""Run directories: the one on-disk format every sleight command writes, and the only code that writes it.

Layout of a run directory (a ``tamper run``, a ``readout audit``, ``readout forecast`` or ``ptrue``)::

    RUN_DIR/manifest.json          created once, atomically, by the first process; never rewritten
    RUN_DIR/sessions/<id>.json     one record per process that worked on the run, written only by it
    RUN_DIR/<table>.parquet/       (or parts/) a folder of Parquet parts, one per committed unit of work
    RUN_DIR/.tmp/<id>/             a live session's files before their rename into place
    RUN_DIR/damaged/<table>/       parts found damaged on resume, moved aside (never deleted)

Why this shape: several processes (``tamper run --shard K/N`` on many machines) may work on one run
at once. Nothing is ever read-modified-written by two of them: the manifest is created with an
exclusive link (the loser compares its config and joins or refuses), each process writes its own
session record, and every part is written to a private temporary file and renamed into place, so a
reader sees a part whole or not at all, and a SIGKILL at any moment loses at most the unit in flight.

The rules every command shares:

* **One manifest schema** (:data:`MANIFEST_FIELDS`): format, version, kind, created, model, config,
  fingerprint, units, plus the kind's own extras; ``sessions``, ``completed`` and ``finished`` are
  derived from the session records when the manifest is read.
* **One refusal rule**: a run is resumed only with the config it was made with; otherwise one line
  names the differing field (:func:`config_diff`), and ``--overwrite`` starts over.
* **Parts are verified, not trusted because their name exists** (:func:`verify_part`): the footer
  must be readable, the schema the table's, the row count the expected one. A damaged part is moved
  aside with one line naming it, and its unit is redone.
* **Atomic writes with fsync** (:func:`write_bytes` and friends) and **JSON-safe dumps**
  (:func:`dumps`: NaN and infinities as null, numpy values as Python ones) exist only here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Self

import pyarrow as pa
import pyarrow.parquet as pq

from sleight.errors import UserError

try:  # POSIX; without it a session cannot tell a dead session's leftovers from a live one's
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

FORMAT = "sleight-run"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SESSIONS_DIR = "sessions"
TMP_DIR = ".tmp"
DAMAGED_DIR = "damaged"
PARQUET_COMPRESSION = "zstd"

# The fields of manifest.json, in the order they are written; see docs/rundir.md.
MANIFEST_FIELDS: dict[str, str] = {
    "format": f'always "{FORMAT}"',
    "version": f"version of this format ({FORMAT_VERSION}); a reader refuses a newer one",
    "kind": "which command made the run: tamper, audit, forecast or ptrue",
    "created": "UTC time the run directory was created (ISO 8601)",
    "model": "the model record (spec, model_id, revision, chat_template_sha256, chat_template_kwargs, tokenizer, engine, engine_version, dtype, device, batch_size) of the first session",
    "config": "everything that decides the records; a resume with a different value is refused",
    "fingerprint": "sha256 of the identity part of config and of the model's identity",
    "units": "how many units of work (questions, items) the run has in all",
}
# Derived when the manifest is read (never stored in manifest.json).
DERIVED_FIELDS: dict[str, str] = {
    "sessions": "the session records (sessions/*.json) in start order",
    "completed": "true once completed sessions' shards cover every unit",
    "finished": "when the last session finished, once completed; else null",
}
SESSION_FIELDS: dict[str, str] = {
    "id": "the session's id (also its file name and its .tmp folder)",
    "started": "UTC start time",
    "finished": "UTC time it stopped normally; null while running or after a kill",
    "completed": "true when every unit of its shard was committed when it finished",
    "shard": '"K/N": the units i with i % N == K - 1 (1/1: all of them)',
    "host": "machine name",
    "pid": "process id on that machine",
    "new_units": "units this session committed",
    "seconds": "how long the session ran (set when it finishes)",
    "device": "the model's device in this session",
    "batch_size": "the model's batch size in this session",
    "engine_version": "the engine's version in this session",
    "versions": "package versions (sleight, python, numpy, pyarrow, and torch/transformers when loaded)",
}
# The parts of a model record that must match for a run to be resumed (device, batch size may differ).
MODEL_IDENTITY = ("model_id", "revision", "chat_template_sha256", "engine", "dtype")

Warn = Callable[[str], None]


def _stderr(line: str) -> None:
    print(f"sleight: {line}", file=sys.stderr, flush=True)


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


# ------------------------------------------------------------------------------------------------
# parts
# ------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------
# config, fingerprint, shards
# ------------------------------------------------------------------------------------------------


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 48 else text[:45] + "..."


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any], keys: Sequence[str] | None = None, prefix: str = "") -> list[str]:
    """``field: <old> there, <new> here`` for each differing field (nested dicts by dotted name)."""
    names = list(keys) if keys is not None else list(dict.fromkeys([*old, *new]))
    out = []
    for k in names:
        a, b = json_safe(old.get(k)), json_safe(new.get(k))
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_diff(a, b, None, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}: {_show(a)} there, {_show(b)} here")
    return out


def identity(config: Mapping[str, Any], keys: Sequence[str] | None) -> dict[str, Any]:
    return dict(config) if keys is None else {k: config.get(k) for k in keys}


def model_identity(model: Mapping[str, Any] | None) -> dict[str, Any]:
    """The model fields that decide records; chat-template arguments (``--thinking``, ...) only when
    given, so a run made before they were recorded resumes under the same fingerprint."""
    ident = {k: (model or {}).get(k) for k in MODEL_IDENTITY}
    if (model or {}).get("chat_template_kwargs"):
        ident["chat_template_kwargs"] = dict((model or {})["chat_template_kwargs"])
    return ident


def fingerprint(config: Mapping[str, Any], model: Mapping[str, Any] | None, keys: Sequence[str] | None = None) -> str:
    """sha256 of what decides the records: the identity part of the config and the model's identity."""
    payload = json.dumps(
        json_safe({"config": identity(config, keys), "model": model_identity(model)}), sort_keys=True, default=str
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def digest(obj: Any) -> str:
    """sha256 of a JSON-able value (inputs such as items or questions)."""
    return hashlib.sha256(json.dumps(json_safe(obj), ensure_ascii=False, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Shard:
    """Shard ``k`` of ``n`` (1-based): the units ``i`` with ``i % n == k - 1``."""

    k: int = 1
    n: int = 1

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"

    def __contains__(self, i: object) -> bool:
        return isinstance(i, int) and i % self.n == self.k - 1

    def indices(self, units: int) -> list[int]:
        return list(range(self.k - 1, units, self.n))

    @property
    def whole(self) -> bool:
        return self.n == 1


ALL = Shard(1, 1)


def parse_shard(text: str | None) -> Shard:
    """``--shard K/N`` (``None``: the whole run)."""
    if text is None:
        return ALL
    try:
        k_s, n_s = text.split("/")
        k, n = int(k_s), int(n_s)
    except ValueError:
        raise UserError(f"--shard must be K/N with whole numbers, e.g. 1/4 (got {text!r})") from None
    if n < 1 or not 1 <= k <= n:
        raise UserError(f"--shard {text}: need 1 <= K <= N (got K={k}, N={n})")
    return Shard(k, n)


def covered(units: int, shards: Iterable[Shard]) -> bool:
    """Whether the union of ``shards`` is every unit in ``range(units)``."""
    left = set(range(units))
    for s in shards:
        left -= set(s.indices(units))
        if not left:
            return True
    return not left


# ------------------------------------------------------------------------------------------------
# the run directory
# ------------------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    """Versions of the packages that decide records (torch and transformers only when loaded)."""
    import platform

    import numpy

    from sleight import __version__

    out = {"sleight": __version__, "python": platform.python_version(), "numpy": numpy.__version__, "pyarrow": pa.__version__}
    for name in ("torch", "transformers"):
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = str(getattr(mod, "__version__", ""))
    return out


class Session:
    """One process's work on a run: its own record file, its own temporary folder (locked while it lives)."""

    def __init__(
        self, run: RunDir, shard: Shard, model: Mapping[str, Any] | None, versions_: Mapping[str, str] | None = None
    ) -> None:
        self.run = run
        self._t0 = time.monotonic()
        started = dt.datetime.now(dt.timezone.utc)
        self.id = f"{started.strftime('%Y%m%dT%H%M%S%f')}-{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.id = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.id)
        self.tmp_dir = run.dir / TMP_DIR / self.id
        self._lock = self._born_locked()
        m = model or {}
        self.record: dict[str, Any] = {
            "id": self.id,
            "started": started.isoformat(timespec="seconds"),
            "finished": None,
            "completed": False,
            "shard": str(shard),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "new_units": 0,
            "device": m.get("device"),
            "batch_size": m.get("batch_size"),
            "engine_version": m.get("engine_version"),
            "versions": dict(versions_ if versions_ is not None else versions()),
        }

    def _born_locked(self) -> Any:
        """The session's folder, appearing with its lock already held (so that no cleaner ever sees
        it unlocked): the lock is taken on a file in ``.tmp/``, then moved into the new folder."""
        root = self.tmp_dir.parent
        for attempt in range(20):  # another session may remove an empty .tmp/ between two steps
            try:
                root.mkdir(parents=True, exist_ok=True)
                lock_path = root / f".{self.id}.lock"
                fh = open(lock_path, "w")
                if fcntl is not None:
                    try:
                        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        raise
                    except OSError:  # a file system without locks (some NFS): leftovers then stay, harmless
                        pass
                self.tmp_dir.mkdir(exist_ok=True)  # a retry finds it made (the id is this session's alone)
                os.replace(lock_path, self.tmp_dir / "lock")
                return fh
            except FileNotFoundError:
                if attempt == 19:
                    raise
                time.sleep(0.01)
        raise AssertionError("unreachable")

    @property
    def path(self) -> Path:
        return self.run.dir / SESSIONS_DIR / f"{self.id}.json"

    def save(self) -> None:
        write_json(self.path, self.record, indent=1, tmp_dir=self.tmp_dir)

    def committed(self, n: int = 1) -> None:
        """Count ``n`` newly committed units (saved at once: a killed session's record says what it did)."""
        self.record["new_units"] += n
        self.save()

    def finish(self, completed: bool) -> None:
        """Record the end (completed: every unit of this session's shard is committed) and let go."""
        self.record["finished"] = now()
        self.record["seconds"] = round(time.monotonic() - self._t0, 3)
        self.record["completed"] = bool(completed)
        try:
            self.save()
        finally:
            self.close()

    def close(self) -> None:
        if not self._lock.closed:
            self._lock.close()
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            try:
                self.tmp_dir.parent.rmdir()  # .tmp/ itself, once no session is left in it
            except OSError:
                pass


class RunDir:
    """One run directory of one ``kind``: checked against a config, joined by sessions, holding parts."""

    def __init__(self, path: Path | str, kind: str, *, identity_keys: Sequence[str] | None = None) -> None:
        self.dir = Path(path)
        self.kind = kind
        self.identity_keys = tuple(identity_keys) if identity_keys is not None else None

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    def parts(self, name: str, schema: pa.Schema) -> Parts:
        return Parts(self.dir, name, schema)

    # -- reading ---------------------------------------------------------------------------------
    def sessions(self) -> list[dict[str, Any]]:
        folder = self.dir / SESSIONS_DIR
        recs = []
        for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                rec = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # a session record is provenance; one unreadable record never blocks a run
            if isinstance(rec, dict):
                recs.append(rec)
        return sorted(recs, key=lambda r: (str(r.get("started", "")), str(r.get("id", ""))))

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest with its derived fields (``sessions``, ``completed``, ``finished``), or None."""
        if not self.manifest_path.is_file():
            return None
        m = read_json(self.manifest_path, "use another --out, or --overwrite to start over")
        if m.get("format") != FORMAT:
            raise UserError(
                f"{self.manifest_path} is not a {FORMAT} manifest (format {m.get('format')!r}); use another --out, or --overwrite to start over"
            )
        if int(m.get("version", 0)) > FORMAT_VERSION:
            raise UserError(
                f"{self.manifest_path} is format version {m.get('version')}; this sleight reads up to {FORMAT_VERSION} (upgrade sleight)"
            )
        m["sessions"] = sessions = self.sessions()
        if "units" in m:
            done = [parse_shard(str(s.get("shard") or "1/1")) for s in sessions if s.get("completed")]
            m["completed"] = covered(int(m["units"]), done)
            ends = [str(s["finished"]) for s in sessions if s.get("finished")]
            m["finished"] = max(ends) if m["completed"] and ends else None
        return m

    def require(self, hint: str = "") -> dict[str, Any]:
        m = self.read_manifest()
        if m is None:
            raise UserError(f"{self.dir} is not a {self.kind} run directory (no {MANIFEST}){'; ' + hint if hint else ''}")
        self._check_kind(m)
        return m

    def _check_kind(self, m: Mapping[str, Any]) -> None:
        if m.get("kind") != self.kind:
            raise UserError(f"{self.dir} holds a '{m.get('kind')}' run, not '{self.kind}'; use another --out")

    def _check_config(self, old: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        """The one refusal rule: one line naming each field that differs from the run's own config."""
        diff = config_diff(old.get("config") or {}, config, self.identity_keys)
        if diff:
            raise UserError(
                f"run directory {self.dir} was made with a different config ({'; '.join(diff)}); use another --out, or --overwrite to start over"
            )

    # -- checking --------------------------------------------------------------------------------
    def check(self, config: Mapping[str, Any], *, overwrite: bool = False) -> dict[str, Any] | None:
        """Before anything expensive: refuse a directory that is not this run, or start it over.

        Returns the manifest to resume, or None for a new run. A different config is refused with one
        line naming each differing field; ``overwrite`` empties a directory that holds a run (of any
        config or kind, readable or not) and never touches one that holds none.
        """
        if self.dir.exists() and not self.dir.is_dir():
            raise UserError(f"--out {self.dir} exists and is not a directory")
        if self.dir.is_dir() and not os.access(self.dir, os.W_OK):
            raise UserError(f"--out {self.dir} is not writable")
        if overwrite and self.manifest_path.is_file():
            self.start_over()
            return None
        old = self.read_manifest() if self.dir.is_dir() else None
        if old is None:
            stray = [p.name for p in self.dir.iterdir() if p.name != TMP_DIR] if self.dir.is_dir() else []
            if stray:
                raise UserError(f"--out {self.dir} is not empty and holds no {MANIFEST}; choose a new or empty directory")
            return None
        self._check_kind(old)
        self._check_config(old, config)
        return old

    def start_over(self) -> None:
        """Empty the run directory (only one that holds a manifest: never a stranger's folder)."""
        if not self.manifest_path.is_file():
            return
        for p in self.dir.iterdir():
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)

    # -- joining ---------------------------------------------------------------------------------
    def open(
        self,
        config: Mapping[str, Any],
        model: Mapping[str, Any] | None,
        *,
        units: int,
        extra: Mapping[str, Any] | None = None,
        shard: Shard = ALL,
        versions_: Mapping[str, str] | None = None,
    ) -> Session:
        """Create the run (exactly one process wins) or join it; start and record this session.

        A joining process with another config or model is refused with one line (the run is not
        touched). Leftovers of dead sessions in ``.tmp/`` are removed.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        session = Session(self, shard, model, versions_)
        try:
            manifest = {
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "kind": self.kind,
                "created": now(),
                "model": dict(model) if model is not None else None,
                "config": dict(config),
                "fingerprint": fingerprint(config, model, self.identity_keys),
                "units": int(units),
                **dict(extra or {}),
                "versions": session.record["versions"],
            }
            if not self._create(manifest, session.tmp_dir):
                old = self.require()
                self._check_config(old, config)
                if model is not None and old.get("model"):
                    mdiff = config_diff(model_identity(old["model"]), model_identity(model))
                    if mdiff:
                        raise UserError(
                            f"run directory {self.dir} was made with a different model ({'; '.join(mdiff)}); use another --out"
                        )
                if int(old.get("units", units)) != int(units):
                    raise UserError(f"run directory {self.dir} has {old.get('units')} units, this run {units}; use another --out")
            self._clear_dead_tmp(session.id)
            session.save()
        except BaseException:
            session.close()
            raise
        return session

    def _create(self, manifest: Mapping[str, Any], tmp_dir: Path) -> bool:
        """Write manifest.json unless it exists (an exclusive link: of two racing processes one wins)."""
        tmp = tmp_dir / MANIFEST
        with open(tmp, "wb") as fh:
            fh.write((dumps(manifest, indent=1) + "\n").encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, self.manifest_path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: exclusive create (content written after)
            try:
                fd = os.open(self.manifest_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as fh:
                fh.write(tmp.read_bytes())
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(self.dir)
        return True

    def _clear_dead_tmp(self, own: str, *, grace_s: float = 300.0) -> None:
        """Remove what killed sessions left in ``.tmp/`` (a live session holds its folder's lock;
        a folder or lock file still being born is left alone for ``grace_s``).

        A lone lock file (``.<id>.lock``) belongs to a session being born: it is created, then locked,
        then moved into the session's folder, so between the first two steps it is unlocked although
        its session is alive. It is removed only once older than ``grace_s``, locked or not."""
        root = self.dir / TMP_DIR
        for p in root.iterdir() if root.is_dir() else []:
            if p.name == own or p.name == f".{own}.lock" or fcntl is None:
                continue
            try:
                young = time.time() - p.stat().st_mtime < grace_s
            except FileNotFoundError:
                continue
            if p.is_file() or not (p / "lock").exists():  # no lock in a folder (yet): being born, or killed at birth
                if not young:
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                continue
            try:
                fh = open(p / "lock")
            except FileNotFoundError:
                continue
            with fh:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # alive (or a file system that cannot tell: keep it)
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)

    def record_session(self, shard: Shard, *, completed: bool, model: Mapping[str, Any] | None = None) -> None:
        """A session that had nothing to do still says so (it may be the one that completes the run)."""
        Session(self, shard, model).finish(completed)

    def commit_parts(
        self,
        config: Mapping[str, Any],
        todo: Sequence[str],
        *,
        units: int,
        start: Callable[[], Mapping[str, Any]],
        write: Callable[[str, Path], None],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Each part of ``todo`` in one session: ``start()`` (load the model; its info) once, then
        ``write(key, tmp_dir)`` commits a part and the session counts it. With nothing to do, a run
        not yet marked completed is marked so (a finished run loads no model)."""
        if not todo:
            if not (self.read_manifest() or {}).get("completed"):
                self.record_session(ALL, completed=True)
            return
        session = self.open(config, start(), units=units, extra=extra)
        completed = False
        try:
            for key in todo:
                write(key, session.tmp_dir)
                session.committed(1)
            completed = True
        finally:
            session.finish(completed)


def kind_of(path: Path | str) -> str | None:
    """The kind of run in ``path`` (None when it holds no readable manifest)."""
    mpath = Path(path) / MANIFEST
    try:
        m = json.loads(mpath.read_text(encoding="utf-8")) if mpath.is_file() else None
    except (OSError, ValueError):
        return None
    return str(m["kind"]) if isinstance(m, dict) and m.get("format") == FORMAT and m.get("kind") else None


def find_runs(paths: Iterable[Path | str], kind: str) -> list[Path]:
    """Run directories of ``kind`` named by ``paths``: a run directory stands for itself, a folder
    of them (a sweep's ``OUT``) for the runs directly inside it, in name order; repeats dropped."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise UserError(f"run directory {p} does not exist")
        if (p / MANIFEST).is_file():
            found = [p]
        else:
            found = sorted(d for d in p.iterdir() if d.is_dir() and kind_of(d) == kind) if p.is_dir() else []
            if not found:
                raise UserError(
                    f"{p} is neither a {kind} run directory nor a folder of them (no {MANIFEST} in it or in its subfolders)"
                )
        out += [d for d in found if d not in out]
    return out


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

    def as_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Self:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})  # type: ignore[arg-type]
