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
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, cast

import pyarrow as pa
import pyarrow.parquet as pq

from sleight import rundir
from sleight.backends import DEFAULT_MODEL, LanguageModel, default_dtype
from sleight.errors import UserError
from sleight.progress import SweepProgress
from sleight.readout.audit.measure import SCHEMA as MEASURE_SCHEMA
from sleight.readout.audit.ptrue_table import PTRUE_SCHEMA
from sleight.readout.ptrue.answers import POLYGRAPH_STOP
from sleight.rundir import RunDir

if TYPE_CHECKING:  # the pipelines are imported where used (_kind_parts)
    from sleight.readout.forecast.pipeline import ForecastRow, ForecastSummary
    from sleight.readout.ptrue.pipeline import PTrueRow, PTrueSummary

ReadingsRow: TypeAlias = "ForecastRow | PTrueRow"  # one row of readings.parquet, as its pipeline writes it

PARTS = "parts"
READINGS = "readings.parquet"
DEFAULT_CHUNK = 8  # items per committed part
DEFAULT_BATCH_SIZE = 64  # rows per forward pass of the model the commands load


_F64_LIST = pa.list_(pa.float64())

FORECAST_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("cluster", pa.int64()),
        ("position", pa.string()),
        ("gold", pa.string()),
        ("note", pa.string()),
        ("note_ok", pa.bool_()),
        ("note_attempts", pa.int64()),
        ("note_raw", pa.string()),
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
        ("reader_target", pa.string()),
        ("reader_generated", pa.string()),
        ("correct_generated", pa.bool_()),
        *[f for f in MEASURE_SCHEMA if f.name not in ("item_id", "variant")],
        ("option_probs", _F64_LIST),
    ]
)

@dataclass(frozen=True)
class Pipeline:
    """What the run directory needs to know about a downstream pipeline."""

    kind: str
    schema: pa.Schema
    work: Callable[[Any, list[Any], list[int]], Sequence[ReadingsRow]]  # (model, chunk items, their indices) -> rows
    rows_per_item: Callable[[Any], int]
    order: Callable[[Mapping[str, Any], Mapping[str, int]], tuple]  # sort key of a row, given item index by id
    group: Callable[[Any], str] | None = None  # items with one group key are never split across parts
    token_budget: Callable[[list[Any]], int] | None = None  # most tokens a chunk's greedy decoding can write (progress)


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


class DownstreamManifest(rundir.Manifest, total=False):
    """A downstream run's manifest.json: the run directory's fields and the kind's extras, the
    command that reproduces the run and its items file and count. ``seconds``: the wall time an
    older manifest held itself (else the sessions' work time, :func:`work_seconds`)."""

    command: str
    items: str
    n_items: int
    seconds: float


@dataclass
class RunResult:
    rows: list[ReadingsRow]
    manifest: rundir.Manifest
    new_items: int
    resumed_items: int


def run_pipeline(
    pipeline: Pipeline,
    items: Sequence[Any],
    out: Path | str,
    config: Mapping[str, object],
    *,
    load_model: Callable[[], Any],
    extra: Mapping[str, object] | None = None,
    chunk: int = DEFAULT_CHUNK,
    overwrite: bool = False,
    progress: SweepProgress | None = None,
) -> RunResult:
    """Run (or resume) ``pipeline`` over ``items`` into ``out``; returns the merged rows in order.

    The config is checked before ``load_model`` is called, and the model is loaded only when some
    chunk is left to do. ``progress`` counts items: the resumed ones at once, then a chunk at a time.
    """
    prog = progress or SweepProgress(len(items), unit="item", enabled=False)
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
        prog.already_done(resumed)
        prog.status(f"{resumed} of {len(items)} items already done in {out}")
    if todo:
        prog.status("loading the model")
        model = load_model()
        session = run.open(config, model.info.as_dict(), units=len(items), extra=extra)
        completed = False
        try:
            for c in todo:
                chunk_items = [items[i] for i in c]
                prog.start_item(f"part {chunk_key(c)}", pipeline.token_budget(chunk_items) if pipeline.token_budget else None)
                rows = pipeline.work(model, chunk_items, list(c))
                parts.write(chunk_key(c), rundir.table_from_rows(rows, pipeline.schema), tmp_dir=session.tmp_dir)
                session.committed(len(c))
                prog.finish_item(len(c))
            completed = True
        finally:
            session.finish(completed)
    elif not (run.read_manifest() or {}).get("completed"):
        run.record_session(rundir.ALL, completed=True)
    rows = _ordered([parts.path(chunk_key(c)) for c in plan], pipeline, index)
    rundir.write_table(merged, rundir.table_from_rows(rows, pipeline.schema), schema=pipeline.schema)
    parts.remove()
    return RunResult(rows, run.require(), sum(len(c) for c in todo), resumed)


def _ordered(paths: Sequence[Path], pipeline: Pipeline, index: Mapping[str, int]) -> list[ReadingsRow]:
    """Rows of the given parts in the pipeline's canonical order (the order of an uninterrupted run)."""
    rows: list[ReadingsRow] = []
    for p in paths:
        rows += cast("list[ReadingsRow]", pq.read_table(p, schema=pipeline.schema).to_pylist())  # read in the pipeline's own schema
    return sorted(rows, key=lambda r: pipeline.order(r, index))


def read_readings(out: Path | str, kind: str) -> tuple[list[ReadingsRow], DownstreamManifest]:
    """The rows and the manifest of a finished run (``--rescore``); one line when there are none."""
    run = RunDir(out, kind)
    manifest = cast(DownstreamManifest, run.require(f"--rescore needs a finished run of 'sleight readout {kind}' in it"))
    path = Path(out) / READINGS
    if not path.is_file():
        raise UserError(f"--rescore needs {path} from an earlier run of this command")
    why = rundir.verify_part(path)
    if why is not None:
        raise UserError(f"{path} is damaged ({why}); run the command again without --rescore to redo it")
    return cast("list[ReadingsRow]", pq.read_table(path).to_pylist()), manifest  # verified: the kind's schema


def work_seconds(manifest: rundir.Manifest) -> float | None:
    """Wall time of the sessions that did model work, summed (None before any finished)."""
    spans = [float(s["seconds"]) for s in manifest.get("sessions") or [] if s.get("new_units") and s.get("seconds") is not None]
    return sum(spans) if spans else None


# ------------------------------------------------------------------------------------------------
# the two commands as library calls
# ------------------------------------------------------------------------------------------------

Setting = str | int | float | bool  # one setting's value in the manifest's config (a flag's value)


class ItemsRecord(TypedDict):
    """The items of a run as the manifest's config records them (a resume with other items is refused).
    A TypedDict, not a dataclass: it is written into manifest.json unchanged and only compared there."""

    path: str
    n: int
    sha256: str


ConfigValue = Setting | None | list[str] | ItemsRecord  # a value of the manifest's config (limit: None; answer_stop: a list)


@dataclass(frozen=True)
class DownstreamConfig:
    """What a downstream command takes besides the model object (``sleight readout forecast|ptrue``
    builds it from its flags; Python builds it directly). ``model``, ``engine`` and ``dtype`` name the
    model (``dtype=None``: the engine's own, recorded resolved); ``items`` is a JSONL file (None: the
    shipped fixture); ``B`` and ``seed`` only score, so a rerun with others rescores the same readings."""

    KIND = ""

    model: str = DEFAULT_MODEL
    engine: str = "hf"
    dtype: str | None = None
    items: str | None = None
    data: str | None = None  # a sleight.readout.data spec (race-h:FILE, mmlu:FILE, ...) instead of items
    limit: int | None = None
    continuation_tokens: int = 16
    chunk: int = DEFAULT_CHUNK
    B: int = 20000
    seed: int = 0

    @property
    def weights_dtype(self) -> str:
        return self.dtype or default_dtype(self.engine)

    def check(self) -> None:
        """One line naming the flag for a value that cannot run (before any item or model is read)."""
        if self.B < 1:
            raise UserError(f"--B must be a positive number of replicates, got {self.B}")
        if self.items and self.data:
            raise UserError("give one of --items FILE or --data SPEC")
        if self.limit is not None and self.limit < 1:
            raise UserError(f"--limit must be at least 1, got {self.limit}")
        for name in ("continuation_tokens", "chunk", *self._counts()):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")

    def _counts(self) -> tuple[str, ...]:
        return ()

    def _own(self) -> dict[str, Setting]:
        """The kind's own settings, in the manifest's config and the command line."""
        return {}

    def _fixed(self) -> dict[str, Setting | list[str]]:
        """What the kind fixes (no flag changes it), in the manifest's config only: a run made
        before it was fixed so is refused a resume instead of mixing two protocols."""
        return {}

    def record(self, items_path: str, items: Sequence[Any]) -> dict[str, ConfigValue]:
        """The manifest's config: what decides the readings (a resume with another value is refused)."""
        return {
            "model": self.model,
            "engine": self.engine,
            "dtype": self.weights_dtype,
            "items": ItemsRecord(path=items_path, n=len(items), sha256=rundir.digest([repr(it) for it in items])),
            **({"data": self.data} if self.data else {}),
            "limit": self.limit,
            "continuation_tokens": self.continuation_tokens,
            "chunk": self.chunk,
            **self._own(),
            **self._fixed(),
        }

    def command(self, out: Path | str, items_path: str) -> str:
        """The command line that reproduces this run: every setting that decides the readings or the
        scores, spelled out."""
        import shlex

        parts = ["sleight", "readout", self.KIND, "--model", self.model, "--engine", self.engine, "--dtype", self.weights_dtype]
        parts += ["--data", self.data] if self.data else ["--items", items_path]
        parts += ["--out", str(out)]
        if self.limit is not None:
            parts += ["--limit", str(self.limit)]
        parts += ["--B", str(self.B), "--seed", str(self.seed), "--continuation-tokens", str(self.continuation_tokens), "--chunk", str(self.chunk)]
        for k, v in self._own().items():
            if isinstance(v, bool):
                parts += [] if v else [f"--no-{k.replace('_', '-')}"]
            else:
                parts += [f"--{k.replace('_', '-')}", str(v)]
        return " ".join(shlex.quote(p) for p in parts)


@dataclass(frozen=True)
class ForecastConfig(DownstreamConfig):
    """``sleight readout forecast``: each note written by App. H's writer
    (:func:`sleight.readout.audit.notes.write_notes`): 1 to ``note_words`` words ending at
    end-of-sequence, within ``note_tokens`` new tokens an attempt, up to four retries (fixed, recorded);
    ``reader``: whose correctness is the target (``spaced``, as Table 4 reads it, or ``unspaced``);
    ``continuation_tokens``: 48, Appendix H's readout (f)."""

    KIND = "forecast"

    continuation_tokens: int = 48
    note_words: int = 32
    note_tokens: int = 256  # App. H: a cap of 256 new tokens
    reader: str = "spaced"

    def check(self) -> None:
        super().check()
        from sleight.readout.forecast.pipeline import check_reader

        check_reader(self.reader)

    def _counts(self) -> tuple[str, ...]:
        return ("note_words", "note_tokens")

    def _own(self) -> dict[str, Setting]:
        return {"note_words": self.note_words, "note_tokens": self.note_tokens, "reader": self.reader}

    def _fixed(self) -> dict[str, Setting | list[str]]:
        from sleight.readout.audit.notes import NOTE_RETRIES

        # App. H's writer (issue 34 item 1): a run whose notes were cut to 32 words by the old writer is refused a resume
        return {"note_writer": "App. H", "note_retries": NOTE_RETRIES}


@dataclass(frozen=True)
class PTrueConfig(DownstreamConfig):
    """``sleight readout ptrue``: ``answers`` own | constructed | both; ``instruct=False``: raw prompts.

    ``decode``: how the own answers are written, ``greedy`` or ``sampled`` as lm-polygraph samples
    (:class:`~sleight.readout.ptrue.answers.Sampling` with ``temperature``, ``top_k``, ``top_p``
    and ``sample_seed``; the library's defaults 1.0, 50, 1.0 and seed 1). A sampled run records
    them in its config (a resume with another setting is refused); a greedy run records none of
    them, so runs from before the setting existed resume unchanged."""

    KIND = "ptrue"

    answers: str = "both"
    max_new_tokens: int = 32
    instruct: bool = True
    decode: str = "greedy"
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    sample_seed: int = 1

    def check(self) -> None:
        super().check()
        self.sampling()

    def sampling(self) -> Any:
        """The :class:`~sleight.readout.ptrue.answers.Sampling` of a sampled run; None when greedy
        (:func:`~sleight.readout.ptrue.answers.answer_sampling`: one line on a bad setting)."""
        from sleight.readout.ptrue.answers import answer_sampling

        return answer_sampling(self.decode, self.temperature, self.top_k, self.top_p, self.sample_seed)

    def _counts(self) -> tuple[str, ...]:
        return ("max_new_tokens",)

    def _own(self) -> dict[str, Setting]:
        own: dict[str, Setting] = {"answers": self.answers, "max_new_tokens": self.max_new_tokens, "instruct": self.instruct}
        if self.decode == "sampled":
            own.update(decode=self.decode, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, sample_seed=self.sample_seed)
        return own

    def _fixed(self) -> dict[str, Setting | list[str]]:
        return {"answer_stop": list(POLYGRAPH_STOP)}  # own answers end at the first newline (App. E's lm-polygraph configs)


@dataclass
class DownstreamResult:
    """A finished downstream run: its folder, the readings, its summary (summary.json less the run's
    description, which is the manifest's), the manifest."""

    out: Path
    rows: list[ReadingsRow]
    summary: ForecastSummary | PTrueSummary
    manifest: DownstreamManifest
    new_items: int = 0
    resumed_items: int = 0

    @property
    def files(self) -> list[Path]:
        return [self.out / n for n in ("report.md", "report.html", "summary.json", READINGS)]


def _forecast_pipeline(config: ForecastConfig, all_items: Sequence[Any], prog: SweepProgress) -> Pipeline:
    from sleight.readout.audit.notes import NOTE_RETRIES
    from sleight.readout.forecast import pipeline as fp
    from sleight.stats.downstream import cluster_codes

    clusters = cluster_codes([it.passage for it in all_items])  # over the whole run, not per part

    def work(model: Any, items: list[Any], indices: list[int]) -> list[ForecastRow]:
        return fp.run_forecast(
            model, items, max_words=config.note_words, note_max_new_tokens=config.note_tokens,
            continuation_tokens=config.continuation_tokens, status=prog.status, progress=prog.tokens,
            clusters=[int(clusters[i]) for i in indices], reader=config.reader,
        )

    return Pipeline(
        "forecast", FORECAST_SCHEMA, work, rows_per_item=lambda _it: len(fp.POSITIONS),
        order=lambda r, index: (index[r["item_id"]], fp.POSITIONS.index(r["position"])), group=lambda it: it.passage,
        token_budget=lambda items: len({it.passage for it in items}) * config.note_tokens * (1 + NOTE_RETRIES),
    )


def _ptrue_pipeline(config: PTrueConfig, _all_items: Sequence[Any], prog: SweepProgress) -> Pipeline:
    from sleight.readout.ptrue import pipeline as pp
    from sleight.readout.ptrue.readouts import READOUT_NAMES

    settings = pp.parse_settings(config.answers)
    sources = ("own", "gold", "wrong")

    def rows_per_item(it: Any) -> int:
        pairs = ("own" in settings) + (len(pp.constructed_pairs([it])) if "constructed" in settings else 0)
        return pairs * len(READOUT_NAMES)

    def order(r: Mapping[str, Any], index: Mapping[str, int]) -> tuple:
        return (pp.SETTINGS.index(r["setting"]), index[r["item_id"]], sources.index(r["answer_source"]), READOUT_NAMES.index(r["readout"]))

    def work(model: Any, items: list[Any], _indices: list[int]) -> list[PTrueRow]:
        return pp.run_ptrue(
            model, items, settings=settings, instruct=config.instruct, max_new_tokens=config.max_new_tokens,
            continuation_tokens=config.continuation_tokens, status=prog.status, progress=prog.tokens,
            sampling=config.sampling(),
        )

    return Pipeline(
        "ptrue", PTRUE_SCHEMA, work, rows_per_item, order,
        token_budget=lambda items: len(items) * config.max_new_tokens if "own" in settings else 0,
    )


def _kind_parts(kind: str) -> tuple[Callable[..., list[Any]], Path, Callable[..., ForecastSummary | PTrueSummary], Callable[..., Any]]:
    """(load items, default items file, summarise, build the report) of a downstream kind."""
    from sleight.readout import downstream_report as rep

    if kind == "forecast":
        from sleight.readout.forecast import pipeline as fp

        return fp.load_race_items, fp.DEFAULT_ITEMS, fp.summarise, rep.forecast_report
    from sleight.readout.items import DEFAULT_QA_ITEMS as DEFAULT_ITEMS
    from sleight.readout.items import load_qa_items
    from sleight.readout.ptrue import pipeline as pp

    return load_qa_items, DEFAULT_ITEMS, pp.summarise, rep.ptrue_report


def _score_and_report(kind: str, out: Path, manifest: DownstreamManifest, rows: list[ReadingsRow], B: int, seed: int) -> ForecastSummary | PTrueSummary:
    """summary.json (the run's description, then the summary) and the reports from the rows (the
    bootstrap runs here, no model needed)."""
    from sleight.readout.downstream_report import RunMeta, write_report

    _load, _default, summarise, build_report = _kind_parts(kind)
    meta = RunMeta.from_manifest(manifest, manifest.get("seconds", work_seconds(manifest)), B, seed)
    summary = summarise(rows, B=B, seed=seed)
    rundir.write_json(out / "summary.json", {**meta.as_json(), **summary.as_json()})
    write_report(build_report(summary, rows, meta, out), out)
    return summary


def load_downstream_items(config: DownstreamConfig) -> tuple[str, list[Any]]:
    """The items file (``config.items`` or the shipped fixture) and its validated items (no model)."""
    load, default, _summarise, _report = _kind_parts(config.KIND)
    if config.data:  # the paper's data through sleight.readout.data; the label names its revision or sha256
        from sleight.readout import data

        ds, found = (data.race_items if config.KIND == "forecast" else data.qa_items)(config.data, config.limit)
        return ds.describe(), found
    path = config.items or str(default)
    return path, load(path, config.limit)


def run_downstream(
    config: DownstreamConfig,
    out: Path | str,
    *,
    load_model: Callable[[], LanguageModel] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    items: tuple[str, list[Any]] | None = None,
) -> DownstreamResult:
    """Items -> model work, resumable, into ``out`` -> readings.parquet, summary.json, report.md/.html
    and the plots: what ``sleight readout forecast`` (a :class:`ForecastConfig`) or ``sleight readout
    ptrue`` (a :class:`PTrueConfig`) does.

    ``load_model`` loads the model when work is left (default: ``config``'s model on its engine and
    dtype, :data:`DEFAULT_BATCH_SIZE` rows per pass, as the commands load it); ``items``: the (path, items) of :func:`load_downstream_items` when already loaded.
    """
    config.check()
    items_path, found = items if items is not None else load_downstream_items(config)
    kind, out = config.KIND, Path(out)
    builder = _forecast_pipeline if isinstance(config, ForecastConfig) else _ptrue_pipeline
    prog = SweepProgress(len(found), unit="item", desc=f"readout {kind}", enabled=progress)
    if load_model is None:
        from sleight.backends import load_model as load

        def load_model() -> LanguageModel:
            return load(config.model, engine=config.engine, dtype=config.weights_dtype, batch_size=DEFAULT_BATCH_SIZE)

    extra = {"command": config.command(out, items_path), "items": items_path, "n_items": len(found)}
    try:
        result = run_pipeline(
            builder(config, found, prog), found, out, config.record(items_path, found),  # type: ignore[arg-type]
            load_model=load_model, extra=extra, chunk=config.chunk, overwrite=overwrite, progress=prog,
        )
        prog.status("scoring (bootstrap) and writing the report")
    finally:
        prog.close()
    manifest = cast(DownstreamManifest, result.manifest)  # written with ``extra`` above
    summary = _score_and_report(kind, out, manifest, result.rows, config.B, config.seed)
    return DownstreamResult(out, result.rows, summary, manifest, result.new_items, result.resumed_items)


def rescore(kind: str, out: Path | str, *, B: int = 20000, seed: int = 0) -> DownstreamResult:
    """No model: summary.json and the reports again from a finished run's own readings and manifest
    (another ``B`` or ``seed``, or a report that crashed): ``--rescore``."""
    if B < 1:
        raise UserError(f"--B must be a positive number of replicates, got {B}")
    out = Path(out)
    rows, manifest = read_readings(out, kind)
    return DownstreamResult(out, rows, _score_and_report(kind, out, manifest, rows, B, seed), manifest)
