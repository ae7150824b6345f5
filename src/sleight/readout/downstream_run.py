"""The run directories of ``readout forecast`` and ``readout ptrue``: resumable, schema'd, refused when changed.

Layout (the :mod:`sleight.rundir` format, kind ``forecast`` or ``ptrue``)::

    RUN_DIR/manifest.json      config (items file and hash, budgets, chunk), model, command
    RUN_DIR/sessions/          one record per process
    RUN_DIR/parts/NNNNN.parquet  one part per chunk of items (removed once merged)
    RUN_DIR/readings.parquet   one row per (item, position) / (setting, pair, readout): the public table
    RUN_DIR/summary.json, report.md, report.html, *.png   (written by the command from the readings)

The items are cut into a fixed partition of chunks (items sharing a passage stay together); each
chunk's model work is committed as one part. A run killed at any moment (SIGKILL included) resumes
with the committed chunks skipped, and because the partition is fixed the resumed run does exactly
the computations (the same batches) of an uninterrupted one. A rerun of a finished run loads no
model at all. A different config is refused with one line naming the field; ``--overwrite``
starts over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sleight import rundir
from sleight.readout.audit.measure import SCHEMA as MEASURE_SCHEMA
from sleight.readout.ptrue.readouts import POSITION_KEYS
from sleight.rundir import RunDir

PARTS = "parts"
READINGS = "readings.parquet"
DEFAULT_CHUNK = 8  # items per committed part


def _measured(names: Sequence[str]) -> list[pa.Field]:
    """The audit's own column types for the readings a pipeline copies from :func:`measure`."""
    return [MEASURE_SCHEMA.field(n) for n in names]


_F64_LIST = pa.list_(pa.float64())

FORECAST_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("cluster", pa.int64()),
        ("position", pa.string()),
        ("gold", pa.string()),
        ("note", pa.string()),
        ("note_raw", pa.string()),
        ("note_raw_words", pa.int64()),
        ("note_truncated", pa.bool_()),
        ("note_tokens", pa.int64()),
        ("note_finish", pa.string()),
        ("reader_choice", pa.string()),
        ("reader_choice_spaced", pa.string()),
        ("reader_agree", pa.bool_()),
        ("reader_logprobs", _F64_LIST),
        ("reader_logprobs_spaced", _F64_LIST),
        ("reader_mass", pa.float64()),
        ("reader_mass_spaced", pa.float64()),
        ("reader_argmax_token", pa.string()),
        ("reader_argmax_class", pa.string()),
        ("correct", pa.bool_()),
        ("correct_spaced", pa.bool_()),
        *[f for f in MEASURE_SCHEMA if f.name not in ("item_id", "variant")],
        ("option_probs", _F64_LIST),
    ]
)

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
        ("readout", pa.string()),
        ("score", pa.float64()),
        ("library_prob", pa.float64()),
        *_measured(PTRUE_READING_COLUMNS),
    ]
)


@dataclass(frozen=True)
class Pipeline:
    """What the run directory needs to know about a downstream pipeline."""

    kind: str
    schema: pa.Schema
    work: Callable[[Any, list[Any], list[int]], list[dict[str, Any]]]  # (model, chunk items, their indices) -> rows
    rows_per_item: Callable[[Any], int]
    order: Callable[[Mapping[str, Any], Mapping[str, int]], tuple]  # sort key of a row, given item index by id
    group: Callable[[Any], str] | None = None  # items with one group key are never split across parts


def plan_chunks(groups: Sequence[str], size: int) -> list[list[int]]:
    """A fixed partition of item indices into chunks of about ``size`` items, whole groups kept
    together, in order of first appearance (pure: the same items give the same chunks)."""
    by_group: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    chunks: list[list[int]] = []
    cur: list[int] = []
    for members in by_group.values():
        if cur and len(cur) + len(members) > max(1, size):
            chunks.append(cur)
            cur = []
        cur = cur + members
    if cur:
        chunks.append(cur)
    return chunks


def chunk_key(chunk: Sequence[int]) -> str:
    return f"{chunk[0]:05d}"


@dataclass
class RunResult:
    rows: list[dict[str, Any]]
    manifest: dict[str, Any]
    new_items: int
    resumed_items: int


def run_pipeline(
    pipeline: Pipeline,
    items: Sequence[Any],
    out: Path | str,
    config: Mapping[str, Any],
    *,
    load_model: Callable[[], Any],
    extra: Mapping[str, Any] | None = None,
    chunk: int = DEFAULT_CHUNK,
    overwrite: bool = False,
    status: Callable[[str], None] | None = None,
) -> RunResult:
    """Run (or resume) ``pipeline`` over ``items`` into ``out``; returns the merged rows in order.

    The config is checked before ``load_model`` is called, and the model is loaded only when some
    chunk is left to do.
    """
    say = status or (lambda _m: None)
    run = RunDir(out, pipeline.kind)
    run.check(config, overwrite=overwrite)
    parts = run.parts(PARTS, pipeline.schema)
    ids = [str(it.id) for it in items]
    index = {k: i for i, k in enumerate(ids)}
    groups = [pipeline.group(it) if pipeline.group else ids[i] for i, it in enumerate(items)]
    plan = plan_chunks(groups, chunk)
    expected = {chunk_key(c): sum(pipeline.rows_per_item(items[i]) for i in c) for c in plan}
    total_rows = sum(expected.values())
    merged = Path(out) / READINGS

    if run.read_manifest() is not None and merged.is_file():
        why = rundir.verify_part(merged, schema=pipeline.schema, rows=total_rows)
        if why is None:
            return RunResult(_ordered([merged], pipeline, index), run.require(), 0, len(items))
        rundir.set_aside(Path(out), merged, why, redo="its items are redone")

    done = parts.verified(list(expected), rows=expected.get, redo=lambda k: f"the items of part {k} are redone")
    todo = [c for c in plan if chunk_key(c) not in done]
    resumed = sum(len(c) for c in plan if chunk_key(c) in done)
    if resumed:
        say(f"{resumed} of {len(items)} items already done in {out}")
    if todo:
        model = load_model()
        session = run.open(config, model.info.as_dict(), units=len(items), extra=extra)
        completed = False
        try:
            for c in todo:
                rows = pipeline.work(model, [items[i] for i in c], list(c))
                parts.write(chunk_key(c), rundir.table_from_rows(rows, pipeline.schema), tmp_dir=session.tmp_dir)
                session.committed(len(c))
            completed = True
        finally:
            session.finish(completed)
    elif not (run.read_manifest() or {}).get("completed"):
        run.record_session(rundir.ALL, completed=True)
    rows = _ordered([parts.path(chunk_key(c)) for c in plan], pipeline, index)
    rundir.write_table(merged, rundir.table_from_rows(rows, pipeline.schema), schema=pipeline.schema)
    parts.remove()
    return RunResult(rows, run.require(), sum(len(c) for c in todo), resumed)


def _ordered(paths: Sequence[Path], pipeline: Pipeline, index: Mapping[str, int]) -> list[dict[str, Any]]:
    """Rows of the given parts in the pipeline's canonical order (the order of an uninterrupted run)."""
    rows: list[dict[str, Any]] = []
    for p in paths:
        rows += pq.read_table(p, schema=pipeline.schema).to_pylist()
    return sorted(rows, key=lambda r: pipeline.order(r, index))


def read_readings(out: Path | str, kind: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows and the manifest of a finished run (``--rescore``); one line when there are none."""
    from sleight.errors import UserError

    run = RunDir(out, kind)
    manifest = run.require(f"--rescore needs a finished run of 'sleight readout {kind}' in it")
    path = Path(out) / READINGS
    if not path.is_file():
        raise UserError(f"--rescore needs {path} from an earlier run of this command")
    why = rundir.verify_part(path)
    if why is not None:
        raise UserError(f"{path} is damaged ({why}); run the command again without --rescore to redo it")
    return pq.read_table(path).to_pylist(), manifest


def work_seconds(manifest: Mapping[str, Any]) -> float | None:
    """Wall time of the sessions that did model work, summed (None before any finished)."""
    spans = [float(s["seconds"]) for s in manifest.get("sessions") or [] if s.get("new_units") and s.get("seconds") is not None]
    return sum(spans) if spans else None
