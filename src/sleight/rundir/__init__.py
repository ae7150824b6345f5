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

What the package owns, by module (bottom first; each imports only those below it):

* :mod:`~sleight.rundir.files`: atomic file writes (:func:`write_bytes`, :func:`write_text`,
  :func:`write_json`, :func:`write_table`), JSON (:func:`json_safe`, :func:`dumps`,
  :func:`read_json`), rows as tables (:func:`table_from_rows`), :func:`now`.
* :mod:`~sleight.rundir.schema`: schema docs (:func:`schema_markdown`, :func:`fields_markdown`) and
  :class:`JsonFields`.
* :mod:`~sleight.rundir.parts`: :func:`verify_part`, :func:`set_aside`, :class:`Parts`.
* :mod:`~sleight.rundir.config`: what decides the records (:func:`config_diff`, :func:`identity`,
  :func:`model_identity`, :func:`fingerprint`, :func:`digest`) and shards (:class:`Shard`,
  :data:`ALL`, :func:`parse_shard`, :func:`covered`).
* :mod:`~sleight.rundir.sessions`: :func:`versions`, :class:`Session`, its :class:`SessionRecord`, :data:`SESSION_FIELDS`.
* :mod:`~sleight.rundir.directory`: :class:`RunDir`, :func:`kind_of`, :func:`find_runs`, the
  manifest's :data:`MANIFEST_FIELDS` and :data:`DERIVED_FIELDS`, and its shape as read (:class:`Manifest`).

It may import only :mod:`sleight.errors` and itself (``tests/test_architecture.py`` holds it to
that); the commands' packages import it, never the other way round. Import names from
``sleight.rundir`` (this module re-exports them), not from its modules.
"""

from __future__ import annotations

from sleight.rundir.config import (
    ALL,
    MODEL_IDENTITY,
    Shard,
    config_diff,
    covered,
    digest,
    fingerprint,
    identity,
    model_identity,
    parse_shard,
)
from sleight.rundir.directory import (
    DERIVED_FIELDS,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    MANIFEST_FIELDS,
    Manifest,
    RunDir,
    find_runs,
    kind_of,
)
from sleight.rundir.files import (
    PARQUET_COMPRESSION,
    dumps,
    json_safe,
    now,
    read_json,
    table_from_rows,
    write_bytes,
    write_json,
    write_table,
    write_text,
)
from sleight.rundir.parts import DAMAGED_DIR, Parts, Warn, set_aside, verify_part
from sleight.rundir.schema import JsonFields, fields_markdown, schema_markdown
from sleight.rundir.sessions import SESSION_FIELDS, SESSIONS_DIR, TMP_DIR, Session, SessionRecord, versions

__all__ = [
    "ALL",
    "DAMAGED_DIR",
    "DERIVED_FIELDS",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "MANIFEST_FIELDS",
    "MODEL_IDENTITY",
    "PARQUET_COMPRESSION",
    "SESSIONS_DIR",
    "SESSION_FIELDS",
    "TMP_DIR",
    "JsonFields",
    "Manifest",
    "Parts",
    "RunDir",
    "Session",
    "SessionRecord",
    "Shard",
    "Warn",
    "config_diff",
    "covered",
    "digest",
    "dumps",
    "fields_markdown",
    "find_runs",
    "fingerprint",
    "identity",
    "json_safe",
    "kind_of",
    "model_identity",
    "now",
    "parse_shard",
    "read_json",
    "schema_markdown",
    "set_aside",
    "table_from_rows",
    "verify_part",
    "versions",
    "write_bytes",
    "write_json",
    "write_table",
    "write_text",
]
