"""A table's config: the shipped YAML files of ``src/sleight/data/tables/`` read into plain records.

A config names the checkpoints (the paper's Hugging Face ids and their chat-template arguments), the
readout runs each checkpoint needs (a command, its data and settings), the table's columns (a
metric of one run's readings, bootstrapped on shared replicates, or a descriptive statistic), the
rows that average checkpoints, and the paper's own numbers where they are known. Every problem is
one line naming the file and the key (:class:`~sleight.errors.UserError`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sleight.backends.spec import DTYPES
from sleight.errors import UserError, parse_yaml
from sleight.readout.data.fixtures import fixtures_dir
from sleight.readout.reproduce import kinds
from sleight.readout.reproduce.spec import Checkpoint, RunSpec

TABLES_DIR = Path(__file__).resolve().parents[2] / "data" / "tables"
# bootstrapped on shared replicates; ``doc_spearman`` (App. G) is the within-document Spearman averaged over
# the documents where it is defined, resampled by document (a run whose unit is ``doc_id``)
METRICS = ("auroc", "brier", "prr", "prr_0.5", "mean", "answer_letter_auroc", "doc_spearman")
# descriptive, no interval: ``min``/``below`` (items under ``floor``, §3's 0.5) for Table 3's columns, ``max`` (App. E's item maxima),
# ``log_median`` (10^median(log10 x), Table 11), ``brier_constant``/``brier_fitted`` (Table 12),
# ``doc_spearman`` (App. G: Spearman of ``column`` against ``target`` within each ``doc_id``, averaged
# over the documents where it is defined), ``doc_undefined`` (App. G's missing documents: those where it is not)
STATS = ("median", "mean", "share", "count", "min", "max", "below", "log_median", "brier_constant", "brier_fitted", "doc_spearman", "doc_undefined", "excess", "excess_share")
# a summary across a table's cells (App. G prints its 28 cells' range and signs, not the cells); ``below``: how
# many cells are under §3's floor of 0.5 (App. I: the stemmed medians below it); ``loo_min``/``loo_max``: the
# lowest/highest of an average's leave-one-checkpoint-out estimates, with its interval (App. E)
SUMMARIES = ("min", "max", "sum", "negative", "positive", "below", "excludes_zero", "loo_min", "loo_max")
LOO_SUMMARIES = ("loo_min", "loo_max")
TARGET_STATS = ("brier_constant", "brier_fitted")
SOURCES = ("auto", "paper", "fixture")


@dataclass(frozen=True)
class Column:
    """One measured column: ``metric`` (bootstrapped) or ``stat`` (descriptive) of ``run``'s rows
    selected by ``where``; ``minus``: a paired difference against the rows ``where`` | ``minus`` selects."""

    key: str
    label: str
    run: str
    where: Mapping[str, Any] = field(default_factory=dict)
    metric: str | None = None
    stat: str | None = None
    score: str = "score"
    target: str | None = None
    column: str | None = None
    equals: Any = None  # the value a count or share matches (a list: any of its values)
    minus: Mapping[str, Any] | None = None
    minus_score: str | None = None  # a paired difference against another score of the same rows (App. G's Δρ)
    integer: bool = False  # a count (printed without decimals)
    constant: float = 0.5  # brier_constant's forecast
    floor: float = 0.5  # below's threshold (§3: the diagnostic floor)
    group: str | None = None  # excess: the 0/1 column of the rows whose hits exceed the others' rate (App. E)
    strata: str | None = None  # excess: the rows are compared only within each value of this column


@dataclass(frozen=True)
class Summary:
    """One number across a table's checkpoint cells: ``how`` (min, max, sum, or how many cells are
    negative, positive, under §3's floor of 0.5, or have an interval excluding zero) over the ``columns``
    given, beside the number the paper prints for it (``paper``; None where it prints none). ``average``: only its
    members' cells (App. H prints bounds over the Qwen3 checkpoints); ``loo_min``/``loo_max`` read one
    column of that average with each member left out in turn (App. E prints the range so)."""

    key: str
    label: str
    columns: tuple[str, ...]
    how: str
    paper: float | None = None
    average: str | None = None
    paper_ci: tuple[float, float] | None = None  # the printed interval, where one is printed


@dataclass(frozen=True)
class Average:
    """A row averaging checkpoints: ``members`` names them, or ``all``, or ``group:NAME``; ``how``
    ``sum`` adds them instead (Table 15 counts the checkpoints where a row holds)."""

    name: str
    members: str | tuple[str, ...] = "all"
    how: str = "mean"

    def select(self, checkpoints: Sequence[Checkpoint]) -> list[str]:
        if self.members == "all":
            return [c.name for c in checkpoints]
        if isinstance(self.members, str):
            group = self.members.removeprefix("group:")
            return [c.name for c in checkpoints if c.group == group]
        return [c.name for c in checkpoints if c.name in self.members]


@dataclass(frozen=True)
class TableConfig:
    name: str
    title: str
    path: Path
    checkpoints: tuple[Checkpoint, ...]
    runs: Mapping[str, RunSpec]
    columns: tuple[Column, ...]
    averages: tuple[Average, ...] = ()
    paper: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    summaries: tuple[Summary, ...] = ()
    limit: int | None = None
    B: int = 20000
    seed: int = 0
    level: float = 0.95
    digits: int = 3
    notes: tuple[str, ...] = ()
    inferred: str = ""
    section: str = ""
    pending: str = ""  # why reproduce cannot run it yet (one line); the table shows the paper's cells
    unreproducible: str = ""  # why it cannot be reproduced here at all (docs/readout.md says so too)
    paper_rows: tuple[str, ...] = ()  # rows the paper prints that are not checkpoints or averages here
    paper_ci: Mapping[str, Mapping[str, tuple[float, float]]] = field(default_factory=dict)  # printed intervals
    dtype: str | None = None  # the weights' dtype the paper ran the item in (None: the engine's default)

    @property
    def runnable(self) -> bool:
        return not (self.pending or self.unreproducible)

    def kind(self, run: str) -> str:
        return self.runs[run].command


def shipped_tables() -> list[str]:
    """The names of the shipped items, in the paper's order (``figure1``, ``table2`` ... ``table16``, then
    the appendix experiments)."""

    def order(p: Path) -> tuple[int, int, str]:
        m = re.fullmatch(r"(figure|table)(\d+)", p.stem)
        return (0 if m.group(1) == "figure" else 1, int(m.group(2)), "") if m else (2, 0, p.stem)

    return [p.stem for p in sorted(TABLES_DIR.glob("*.yaml"), key=order)]


def table_path(name: str | Path) -> Path:
    """A shipped table's YAML by name (``table2``, ``2``), or a YAML file's path."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise UserError(f"table config not found: {p}")
        return p
    text = str(name).lower()
    key = f"table{text}" if text.isdigit() else text
    path = TABLES_DIR / f"{key}.yaml"
    if not path.is_file():
        raise UserError(f"no shipped table '{name}' (shipped: {', '.join(shipped_tables())}; or give a .yaml file)")
    return path


class _Reader:
    """Typed access to a YAML mapping, every error one line naming the file and the key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, why: str) -> UserError:
        return UserError(f"{self.path.name}: {key}: {why}")

    def mapping(self, obj: Any, key: str) -> dict[str, Any]:
        if obj is None:
            return {}
        if not isinstance(obj, dict):
            raise self.fail(key, f"expected a mapping, got {type(obj).__name__}")
        return obj

    def items(self, obj: Any, key: str) -> list[Any]:
        if not isinstance(obj, list) or not obj:
            raise self.fail(key, "expected a non-empty list")
        return obj

    def text(self, obj: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
        v = obj.get(key, default)
        if not isinstance(v, str) or not v:
            raise self.fail(f"{where}.{key}", "expected a non-empty string" if v is None else f"expected a string, got {v!r}")
        return v

    def unknown(self, obj: Mapping[str, Any], known: Sequence[str], where: str) -> None:
        extra = sorted(set(obj) - set(known))
        if extra:
            raise self.fail(where, f"unknown key(s) {', '.join(map(str, extra))} (known: {', '.join(known)})")


def _check_spec(r: _Reader, spec: str, key: str, command: str, settings: Mapping[str, Any], fixture: bool) -> None:
    from sleight.readout.data import FAMILIES, is_data_spec
    from sleight.readout.data.common import parse_spec

    if not is_data_spec(spec):
        raise r.fail(key, f"'{spec}' is not a data spec FAMILY:WHERE[:key=value] (FAMILY one of {', '.join(FAMILIES)})")
    parsed = parse_spec(spec, tuple(FAMILIES))
    families = kinds.kind(command).families(settings)
    if parsed.family not in families:
        use = command + (f" --preset {settings['preset']}" if settings.get("preset") else "")
        raise r.fail(key, f"{parsed.family} data does not serve {use} (it takes {', '.join(families)})")
    if fixture:
        path = Path(spec.replace("{fixtures}", str(fixtures_dir())).split(":")[1])
        if not path.exists():
            raise r.fail(key, f"fixture file not found: {path}")


def _shared_run(r: _Reader, name: str, ref: str) -> RunSpec:
    """A run written ``<table>/<run>``: that shipped table's run as it states it, under this table's
    name (tables that read the same records state them once; reproducing both runs them once)."""
    where = f"runs.{name}"
    table, _, run = ref.partition("/")
    if not table or not run:
        raise r.fail(where, f"expected a run's settings or '<table>/<run>', got '{ref}'")
    try:
        path = table_path(table)
    except UserError as exc:
        raise r.fail(where, f"'{ref}': {exc}") from None
    if path == r.path:
        raise r.fail(where, f"'{ref}' names this table; state the run here once")
    other = _Reader(path)
    runs = other.mapping(other.mapping(parse_yaml(path.read_text(encoding="utf-8"), path.name), "(top level)").get("runs"), "runs")
    if run not in runs:
        raise r.fail(where, f"'{run}' is not one of {table}'s runs ({', '.join(runs)})")
    if isinstance(runs[run], str):
        raise r.fail(where, f"{table}'s run '{run}' is itself '{runs[run]}': name the table that states it")
    return _run(other, name, runs[run])


def _run(r: _Reader, name: str, raw: Any) -> RunSpec:
    where = f"runs.{name}"
    if isinstance(raw, str):
        return _shared_run(r, name, raw)
    obj = r.mapping(raw, where)
    r.unknown(obj, ("command", "data", "settings", "sampling_from", "items"), where)
    command = r.text(obj, "command", where)
    if command not in kinds.names():
        raise r.fail(f"{where}.command", f"'{command}' is not one of {', '.join(kinds.names())}")
    data = r.mapping(obj.get("data"), f"{where}.data")
    r.unknown(data, ("paper", "fixture"), f"{where}.data")
    settings = r.mapping(obj.get("settings"), f"{where}.settings")
    kind = kinds.kind(command)
    allowed = kind.fields()
    for k in settings:
        if k not in allowed:
            raise r.fail(f"{where}.settings.{k}", f"not a setting of readout {command} (settings: {', '.join(allowed)})")
    refused = kind.check(settings)
    if refused:
        raise r.fail(f"{where}.settings", refused)
    paper = r.text(data, "paper", f"{where}.data")
    fixture = r.text(data, "fixture", f"{where}.data")
    _check_spec(r, paper, f"{where}.data.paper", command, settings, fixture=False)
    _check_spec(r, fixture, f"{where}.data.fixture", command, settings, fixture=True)
    sampling_from = obj.get("sampling_from")
    if sampling_from is not None and (command not in ("ptrue", "estimators") or sampling_from != "generation_config"):
        raise r.fail(f"{where}.sampling_from", "only a ptrue or estimators run samples from each checkpoint's generation_config")
    items = obj.get("items")
    if items is not None and (not isinstance(items, int) or items < 1):
        raise r.fail(f"{where}.items", f"expected a positive integer, got {items!r}")
    return RunSpec(name, command, paper, fixture, dict(settings), sampling_from, items)


def _column(r: _Reader, k: int, raw: Any, runs: Mapping[str, RunSpec], runnable: bool = True) -> Column:
    where = f"columns[{k}]"
    obj = r.mapping(raw, where)
    r.unknown(obj, [f.name for f in dataclasses.fields(Column)], where)
    key = r.text(obj, "key", where)
    if obj.get("run") is None and obj.get("metric") is None and obj.get("stat") is None:  # the paper's cells only (not measured here)
        return Column(key=key, label=str(obj.get("label") or key), run="", integer=bool(obj.get("integer")))
    run = r.text(obj, "run", where)
    if run not in runs:
        raise r.fail(f"{where}.run", f"'{run}' is not one of the runs ({', '.join(runs)})")
    command = runs[run].command
    metric, stat = obj.get("metric"), obj.get("stat")
    if (metric is None) == (stat is None):
        raise r.fail(where, "give one of metric (bootstrapped) or stat (descriptive)")
    if metric is not None and metric not in METRICS:
        raise r.fail(f"{where}.metric", f"'{metric}' is not one of {', '.join(METRICS)}")
    if stat is not None and stat not in STATS:
        raise r.fail(f"{where}.stat", f"'{stat}' is not one of {', '.join(STATS)}")
    if stat is not None and stat not in ("count", *TARGET_STATS) and not obj.get("column"):
        raise r.fail(where, f"stat {stat} needs a column")
    if stat == "count" and obj.get("column") and "equals" not in obj:
        raise r.fail(where, "stat count with a column needs equals (the value whose rows are counted)")
    if stat == "share" and "equals" not in obj:
        raise r.fail(where, "stat share needs equals (the value whose share is counted)")
    if stat in ("excess", "excess_share") and (not obj.get("group") or "equals" not in obj):
        raise r.fail(where, f"stat {stat} needs a group (the 0/1 column of the rows in excess) and equals (the value counted)")
    if obj.get("minus") is not None and metric is None:
        raise r.fail(f"{where}.minus", "a paired difference needs a metric")
    if obj.get("minus_score") is not None and metric is None:
        raise r.fail(f"{where}.minus_score", "a paired difference needs a metric")
    if metric == "doc_spearman" and kinds.kind(command).unit != "doc_id":
        raise r.fail(f"{where}.metric", f"doc_spearman resamples documents; {command}'s readings are resampled by {kinds.kind(command).unit}")
    if stat in ("doc_spearman", "doc_undefined") and not obj.get("column"):
        raise r.fail(where, f"stat {stat} needs a column")
    known = kinds.kind(command).columns()
    values = kinds.kind(command).values()
    for part in ("where", "minus"):
        sel = r.mapping(obj.get(part), f"{where}.{part}")
        for c, v in sel.items():
            if c not in known:
                raise r.fail(f"{where}.{part}.{c}", f"not a column of {command}'s readings")
            if c in values and v not in values[c]:
                raise r.fail(f"{where}.{part}.{c}", f"'{v}' is not one of {', '.join(values[c])}")
    for part in ("score", "target", "column", "minus_score", "group", "strata"):
        named = obj.get(part)
        if named is not None and named not in known:
            raise r.fail(f"{where}.{part}", f"'{named}' is not a column of {command}'s readings")
    label = obj.get("label") or key
    return Column(
        key=key, label=str(label), run=run, where=dict(obj.get("where") or {}), metric=metric, stat=stat,
        score=str(obj.get("score") or "score"), target=obj.get("target"), column=obj.get("column"), equals=obj.get("equals"),
        minus=dict(obj["minus"]) if obj.get("minus") is not None else None, minus_score=obj.get("minus_score"),
        constant=float(obj.get("constant", 0.5)), floor=float(obj.get("floor", 0.5)), integer=bool(obj.get("integer")) or stat in ("count", "below"),
        group=obj.get("group"), strata=obj.get("strata"),
    )


def _checkpoint(r: _Reader, k: int, raw: Any) -> Checkpoint:
    where = f"checkpoints[{k}]"
    obj = r.mapping(raw, where)
    r.unknown(obj, ("name", "model", "label", "thinking", "chat_template_kwargs", "group", "revision", "params_b", "generation_config"), where)
    kwargs = dict(r.mapping(obj.get("chat_template_kwargs"), f"{where}.chat_template_kwargs"))
    thinking = obj.get("thinking")
    if thinking is not None:
        if thinking not in (True, False, "on", "off"):
            raise r.fail(f"{where}.thinking", f"expected on or off, got {thinking!r}")
        kwargs["enable_thinking"] = thinking in (True, "on")
    name = r.text(obj, "name", where)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise r.fail(f"{where}.name", f"'{name}' must be a folder name (letters, digits, . _ -)")
    params = obj.get("params_b")
    if params is not None and (not isinstance(params, (int, float)) or params <= 0):
        raise r.fail(f"{where}.params_b", f"expected a positive number, got {params!r}")
    gen = dict(r.mapping(obj.get("generation_config"), f"{where}.generation_config"))
    extra = sorted(set(gen) - {"temperature", "top_k", "top_p"})
    if extra:
        raise r.fail(f"{where}.generation_config", f"unknown key(s) {', '.join(extra)} (known: temperature, top_k, top_p)")
    rev = obj.get("revision")
    return Checkpoint(
        name, r.text(obj, "model", where), str(obj.get("label") or ""), kwargs, obj.get("group"),
        None if rev is None else str(rev), None if params is None else float(params), gen,
    )


def load_table(name: str | Path) -> TableConfig:
    """A table's config by shipped name or YAML path, validated (no model, no data read)."""
    path = table_path(name)
    r = _Reader(path)
    raw = parse_yaml(path.read_text(encoding="utf-8"), path.name)
    obj = r.mapping(raw, "(top level)")
    known = (
        "table", "title", "section", "inferred", "pending", "unreproducible", "checkpoints", "runs", "columns", "averages", "paper", "paper_rows",
        "summaries", "limit", "bootstrap", "digits", "notes", "dtype",
    )
    r.unknown(obj, known, "(top level)")
    section = r.text(obj, "section", "(top level)")
    pending, unrepro = str(obj.get("pending") or ""), str(obj.get("unreproducible") or "")
    runnable = not (pending or unrepro)
    checkpoints = tuple(_checkpoint(r, k, c) for k, c in enumerate(r.items(obj.get("checkpoints"), "checkpoints")))
    names = [c.name for c in checkpoints]
    if len(set(names)) != len(names):
        raise r.fail("checkpoints", "checkpoint names must be unique")
    runs_raw = r.mapping(obj.get("runs"), "runs")
    if not runs_raw and runnable:
        raise r.fail("runs", "expected at least one run (or pending: / unreproducible: saying why there is none)")
    runs = {n: _run(r, n, v) for n, v in runs_raw.items()}
    columns = tuple(_column(r, k, c, runs, runnable) for k, c in enumerate(r.items(obj.get("columns"), "columns")))
    if len({c.key for c in columns}) != len(columns):
        raise r.fail("columns", "column keys must be unique")
    averages = []
    for k, a in enumerate(obj.get("averages") or []):
        a = r.mapping(a, f"averages[{k}]")
        r.unknown(a, ("name", "members", "how"), f"averages[{k}]")
        how = a.get("how", "mean")
        if how not in ("mean", "sum"):
            raise r.fail(f"averages[{k}].how", f"expected mean or sum, got {how!r}")
        members = a.get("members", "all")
        if isinstance(members, list):
            missing = [m for m in members if m not in names]
            if missing:
                raise r.fail(f"averages[{k}].members", f"not checkpoints of this table: {', '.join(map(str, missing))}")
            members = tuple(members)
        elif not (members == "all" or (isinstance(members, str) and members.startswith("group:"))):
            raise r.fail(f"averages[{k}].members", "expected all, group:NAME or a list of checkpoint names")
        averages.append(Average(r.text(a, "name", f"averages[{k}]"), members, how))
    paper_raw = r.mapping(obj.get("paper"), "paper")
    paper_rows = tuple(str(x) for x in obj.get("paper_rows") or ())
    rows = set(names) | {a.name for a in averages} | set(paper_rows)
    keys = {c.key for c in columns}
    paper: dict[str, dict[str, float]] = {}
    paper_ci: dict[str, dict[str, tuple[float, float]]] = {}
    for row, vals in paper_raw.items():
        if row not in rows:
            raise r.fail(f"paper.{row}", "not a row of this table (a checkpoint name, an average's name or one of paper_rows)")
        for key, v in r.mapping(vals, f"paper.{row}").items():
            if key not in keys:
                raise r.fail(f"paper.{row}.{key}", "not a column key of this table")
            if v is None:
                continue  # printed as "—" / "n/a" in the paper
            if isinstance(v, list) and len(v) == 3 and all(_is_number(x) for x in v):
                paper_ci.setdefault(row, {})[key] = (float(v[1]), float(v[2]))
                v = v[0]
            if not _is_number(v):
                raise r.fail(f"paper.{row}.{key}", f"expected a number or [estimate, low, high], got {v!r}")
            paper.setdefault(row, {})[key] = float(v)
    means = {a.name for a in averages if a.how == "mean"}
    summaries = tuple(_summary(r, k, s, keys, means) for k, s in enumerate(r.items(obj["summaries"], "summaries") if obj.get("summaries") is not None else ()))
    if len({s.key for s in summaries} | keys) != len(summaries) + len(keys):
        raise r.fail("summaries", "summary keys must be unique and differ from the column keys")
    B, seed, level, dtype, limit = _run_settings(r, obj)
    return TableConfig(
        name=str(obj.get("table") or path.stem), title=str(obj.get("title") or path.stem), path=path, checkpoints=checkpoints,
        runs=runs, columns=columns, averages=tuple(averages), paper=paper, summaries=summaries, limit=limit, B=B, seed=seed, level=level,
        digits=int(obj.get("digits", 3)), notes=tuple(str(n) for n in obj.get("notes") or ()), inferred=str(obj.get("inferred") or ""),
        section=section, pending=pending, unreproducible=unrepro, paper_rows=paper_rows, paper_ci=paper_ci, dtype=dtype,
    )


def _summary(r: _Reader, k: int, raw: Any, keys: set[str], means: set[str]) -> Summary:
    where = f"summaries[{k}]"
    obj = r.mapping(raw, where)
    r.unknown(obj, [f.name for f in dataclasses.fields(Summary) if f.name != "paper_ci"], where)
    how = r.text(obj, "how", where)
    if how not in SUMMARIES:
        raise r.fail(f"{where}.how", f"'{how}' is not one of {', '.join(SUMMARIES)}")
    columns = obj.get("columns")
    if not isinstance(columns, list) or not columns:
        raise r.fail(f"{where}.columns", "expected a list of column keys")
    unknown = [c for c in columns if c not in keys]
    if unknown:
        raise r.fail(f"{where}.columns", f"not column keys of this table: {', '.join(map(str, unknown))}")
    average = obj.get("average")
    if how in LOO_SUMMARIES and (average is None or len(columns) != 1):
        raise r.fail(f"{where}.average", f"{how} needs one column and an average")
    if average is not None and average not in means:
        raise r.fail(f"{where}.average", f"expected the name of a mean average of this table, got {average!r}")
    paper, paper_ci = obj.get("paper"), None
    if isinstance(paper, list) and len(paper) == 3 and all(_is_number(x) for x in paper):
        paper, paper_ci = paper[0], (float(paper[1]), float(paper[2]))
    if paper is not None and not _is_number(paper):
        raise r.fail(f"{where}.paper", f"expected a number or [estimate, low, high], got {paper!r}")
    key = r.text(obj, "key", where)
    value = None if paper is None else float(paper)
    return Summary(key, str(obj.get("label") or key), tuple(map(str, columns)), how, value, None if average is None else str(average), paper_ci)


def _run_settings(r: _Reader, obj: Mapping[str, Any]) -> tuple[int, int, float, str | None, int | None]:
    """The table's bootstrap (B, seed, level), pinned dtype and item limit, each checked."""
    boot = r.mapping(obj.get("bootstrap"), "bootstrap")
    r.unknown(boot, ("B", "seed", "level"), "bootstrap")
    B, seed, level = boot.get("B", 20000), boot.get("seed", 0), boot.get("level", 0.95)
    if not isinstance(B, int) or B < 1:
        raise r.fail("bootstrap.B", f"expected a positive integer, got {B!r}")
    if not isinstance(level, float) or not 0 < level < 1:
        raise r.fail("bootstrap.level", f"expected a number between 0 and 1, got {level!r}")
    dtype = obj.get("dtype")
    if dtype is not None and dtype not in DTYPES:
        raise r.fail("dtype", f"expected one of {', '.join(DTYPES)}, got {dtype!r}")
    limit = obj.get("limit")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise r.fail("limit", f"expected a positive integer or null, got {limit!r}")
    return B, int(seed), level, dtype, limit


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
