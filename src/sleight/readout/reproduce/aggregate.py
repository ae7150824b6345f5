"""A table's numbers from the per-checkpoint readings: pure functions, no model, no I/O.

Every bootstrapped cell of a table is computed on **shared replicates**: for each run (one data set),
the units the bootstrap resamples (forecast: passages; P(True), audit: questions) are pooled over the
checkpoints, and one seeded draw of ``B`` replicates over those units is applied to every
checkpoint and every column. A checkpoint's cell is its statistic on the data (the estimate) and on
each replicate (a percentile interval); an average over checkpoints is the mean of their estimates,
and its interval the percentiles of the per-replicate means, so the interval of the average carries
the correlation the checkpoints share through their common items (averaging separate intervals
would not). A paired difference (``minus``) is taken replicate by replicate, on the items both
selections score. Descriptive statistics (``stat``: median, mean, share, count) have no interval;
their average is the mean over checkpoints. A summary reads across the checkpoints' cells (App. G
prints the range and signs of its 28 cells, not the cells).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sleight.readout.audit.checks import MASS_FLOOR
from sleight.readout.reproduce import kinds
from sleight.readout.reproduce.config import LOO_SUMMARIES, Average, Checkpoint, Column, Summary, TableConfig
from sleight.stats import auroc, brier, mean, prr, resample
from sleight.stats.downstream import (
    answer_letter_auroc,
    constant_brier,
    leave_one_out,
    leave_one_out_intervals,
    log_median,
    stratified_excess,
)

_CHUNK = 512  # replicates per statistic call (bounds the (b, n) weight matrix)


@dataclass(frozen=True)
class Cell:
    """One number of the table: the estimate (NaN: undefined), its interval (NaN: none), the rows
    it rests on, and its bootstrap replicates (``None`` for a descriptive statistic)."""

    estimate: float
    low: float = math.nan
    high: float = math.nan
    n: int | None = None
    n_invalid: int | None = None
    replicates: NDArray[np.float64] | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        def f(x: float) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        return {"estimate": f(self.estimate), "low": f(self.low), "high": f(self.high), "n": self.n, "n_invalid": self.n_invalid}


@dataclass(frozen=True)
class TableRow:
    name: str
    label: str
    kind: str  # checkpoint | average
    members: tuple[str, ...]
    cells: Mapping[str, Cell]


@dataclass(frozen=True)
class SummaryCell:
    """A :class:`~sleight.readout.reproduce.config.Summary` computed: its value over ``n`` defined
    checkpoint cells (NaN when none is defined)."""

    summary: Summary
    value: float
    n: int
    low: float = math.nan  # a leave-one-out summary's interval (App. E)
    high: float = math.nan

    def as_dict(self) -> dict[str, object]:
        s = self.summary

        def f(x: float) -> float | None:
            return x if math.isfinite(x) else None

        value = f(self.value)
        diff = value - s.paper if value is not None and s.paper is not None else None
        out: dict[str, object] = {"key": s.key, "label": s.label, "how": s.how, "columns": list(s.columns), "value": value, "n": self.n, "paper": s.paper, "difference": diff}
        if s.average is not None:
            out.update(average=s.average, low=f(self.low), high=f(self.high), paper_interval=None if s.paper_ci is None else list(s.paper_ci))
        return out


@dataclass(frozen=True)
class TableResult:
    """A table ready for the writers: its columns, rows (checkpoints, then averages) and the
    paper's numbers by (row name, column key)."""

    name: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[TableRow, ...]
    paper: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    paper_ci: Mapping[str, Mapping[str, tuple[float, float]]] = field(default_factory=dict)
    paper_rows: tuple[str, ...] = ()
    section: str = ""
    status: str = ""  # empty when reproduced; else why only the paper's cells are shown
    digits: int = 3
    level: float = 0.95
    B: int = 0
    seed: int = 0
    notes: tuple[str, ...] = ()
    leave_one_out: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    summaries: tuple[SummaryCell, ...] = ()


def _letter_code(answer: Any) -> float:
    """The own answer's first standalone A-D letter as 0-3 (App. E's answer letter); NaN if none."""
    import re

    m = re.search(r"(?<![^\W_])([ABCD])(?![^\W_])", answer) if isinstance(answer, str) else None
    return float("ABCD".index(m.group(1))) if m else math.nan


def _letter_stat(x: NDArray[np.float64], t: NDArray[np.float64], weights: NDArray[Any] | None = None, *, letters: NDArray[np.float64]) -> Any:
    return answer_letter_auroc(x, t, letters, weights)


def _batched(metric: str) -> Callable[..., Any]:
    """The bootstrapped statistic of (score, target[, weights])."""
    if metric == "mean":
        return lambda s, _y, weights=None: mean(s, weights)
    table: dict[str, Callable[..., Any]] = {"auroc": auroc, "brier": brier, "prr": prr, "prr_0.5": functools.partial(prr, max_rejection=0.5)}
    return table[metric]


def select(rows: Sequence[Mapping[str, Any]], where: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The rows whose columns equal every value of ``where``."""
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def _number(x: Any) -> float:
    if x is None:
        return math.nan
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def unit_index(rows_by_checkpoint: Mapping[str, Sequence[Mapping[str, Any]]], unit: str) -> dict[str, int]:
    """The bootstrap units of one run pooled over checkpoints, in order of first appearance."""
    index: dict[str, int] = {}
    for rows in rows_by_checkpoint.values():
        for r in rows:
            index.setdefault(str(r[unit]), len(index))
    return index


def shared_counts(n_units: int, B: int, seed: int) -> NDArray[np.int64]:
    """``(B, n_units)``: how many times each unit is drawn in each replicate; the same for every
    checkpoint and column that resamples these units (``sleight.stats.resample``'s draws)."""
    if n_units == 0:
        return np.zeros((B, 0), dtype=np.int64)
    return resample(n_units, B, seed).counts


def _interval(estimate: float, reps: NDArray[np.float64], level: float, n: int | None) -> Cell:
    valid = reps[np.isfinite(reps)]
    low = high = math.nan
    if math.isfinite(estimate) and valid.size:
        alpha = (1.0 - level) / 2.0
        low, high = (float(x) for x in np.quantile(valid, [alpha, 1.0 - alpha]))
    return Cell(float(estimate), low, high, n, int(reps.size - valid.size), reps)


def _arrays(
    rows: Sequence[Mapping[str, Any]], column: Column, kind: str, units: Mapping[str, int], where: Mapping[str, Any]
) -> tuple[list[tuple], NDArray[np.float64], NDArray[np.float64], NDArray[np.intp], NDArray[np.float64]]:
    spec = kinds.kind(kind)
    target = column.target or spec.target
    out: list[tuple] = []
    keys: list[tuple] = []
    for r in select(rows, where):
        s = _number(r.get(column.score))
        y = 0.0 if column.metric == "mean" else _number(r.get(target))
        g = _letter_code(r.get("answer")) if column.metric == "answer_letter_auroc" else 0.0
        if math.isfinite(s) and math.isfinite(y) and math.isfinite(g):
            out.append((s, y, units[str(r[spec.unit])], g))
            keys.append(tuple(r.get(c) for c in spec.pair if c not in (column.minus or {})))
    arr = np.asarray(out, dtype=np.float64).reshape(-1, 4)
    return keys, arr[:, 0], arr[:, 1], arr[:, 2].astype(np.intp), arr[:, 3]


def metric_cell(
    rows: Sequence[Mapping[str, Any]], column: Column, kind: str, units: Mapping[str, int], counts: NDArray[np.int64], level: float = 0.95
) -> Cell:
    """A bootstrapped cell of one checkpoint: ``column.metric`` of its selected rows (or the paired
    difference against the ``minus`` rows), on the replicates ``counts`` (units x replicates shared
    with every other checkpoint)."""
    assert column.metric is not None
    if column.metric == "doc_spearman":
        return doc_rho_cell(rows, column, units, counts, level)
    keys_a, s_a, y_a, u_a, g_a = _arrays(rows, column, kind, units, column.where)
    if column.minus is None:
        s, y, u, g = s_a, y_a, u_a, g_a
        s_b = None
    else:
        keys_b, s_bb, _y_b, _u_b, _g_b = _arrays(rows, column, kind, units, {**column.where, **column.minus})
        at = {k: i for i, k in enumerate(keys_b)}
        both = [(i, at[k]) for i, k in enumerate(keys_a) if k in at]
        ia = np.asarray([i for i, _ in both], dtype=np.intp)
        ib = np.asarray([j for _, j in both], dtype=np.intp)
        s, y, u, g, s_b = s_a[ia], y_a[ia], u_a[ia], g_a[ia], s_bb[ib]
    fn: Callable[..., Any]
    if column.metric == "answer_letter_auroc":  # the letters ride along with the item (App. E)
        fn = functools.partial(_letter_stat, letters=g)
    else:
        fn = _batched(column.metric)
    n = int(s.size)
    B = counts.shape[0]
    if n == 0:
        return Cell(math.nan, n=0, n_invalid=B, replicates=np.full(B, math.nan))

    def stat(x: NDArray[np.float64], weights: NDArray[Any] | None = None) -> Any:
        return fn(x, y, weights=weights) if weights is not None else fn(x, y)

    estimate = float(stat(s)) - (float(stat(s_b)) if s_b is not None else 0.0)
    if not math.isfinite(estimate):
        return Cell(math.nan, n=n, n_invalid=B, replicates=np.full(B, math.nan))
    reps = np.empty(B)
    for start in range(0, B, _CHUNK):
        w = counts[start : start + _CHUNK][:, u]
        r = np.asarray(stat(s, w), dtype=np.float64)
        if s_b is not None:
            r = r - np.asarray(stat(s_b, w), dtype=np.float64)
        reps[start : start + w.shape[0]] = r
    return _interval(estimate, reps, level, n)


def _doc_rhos(chosen: Sequence[Mapping[str, Any]], score: str, target: str) -> dict[str, float]:
    """Each document's within-document Spearman of ``score`` against ``target`` (NaN: undefined)."""
    from sleight.readout.scan.grades import per_document_rho

    scores = [_number(r.get(score)) for r in chosen]
    per = per_document_rho([x if math.isfinite(x) else None for x in scores], [_number(r.get(target)) for r in chosen], [str(r.get("doc_id")) for r in chosen])
    return {str(d): math.nan if v is None else float(v) for d, v in per.items()}


def _defined_mean(rho: NDArray[np.float64], w: NDArray[Any]) -> Any:
    """The mean of the defined rhos, each document weighted by how often a replicate draws it."""
    ok = np.isfinite(rho)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w[..., ok] @ rho[ok]) / w[..., ok].sum(axis=-1)


def doc_rho_cell(rows: Sequence[Mapping[str, Any]], column: Column, units: Mapping[str, int], counts: NDArray[np.int64], level: float = 0.95) -> Cell:
    """App. G's rho: the within-document Spearman of ``column.score`` against the target, averaged
    over the documents where it is defined, minus the same of ``column.minus_score`` when given;
    each replicate resamples documents and recomputes both averages on the same draw (the paired
    document bootstrap). ``n`` counts the documents where the (first) rho is defined."""
    chosen = select(rows, column.where)
    target = column.target or "human"
    a = _doc_rhos(chosen, column.score, target)
    docs = list(a)
    ra = np.asarray([a[d] for d in docs], dtype=np.float64)
    rb = None
    if column.minus_score is not None:
        b = _doc_rhos(chosen, column.minus_score, target)
        rb = np.asarray([b[d] for d in docs], dtype=np.float64)
    n = int(np.isfinite(ra).sum())
    one = np.ones(len(docs))
    estimate = float(_defined_mean(ra, one)) - (float(_defined_mean(rb, one)) if rb is not None else 0.0)
    B = counts.shape[0]
    if not math.isfinite(estimate):
        return Cell(math.nan, n=n, n_invalid=B, replicates=np.full(B, math.nan))
    w = counts[:, np.asarray([units[d] for d in docs], dtype=np.intp)].astype(np.float64)
    reps = np.asarray(_defined_mean(ra, w), dtype=np.float64)
    if rb is not None:
        reps = reps - np.asarray(_defined_mean(rb, w), dtype=np.float64)
    return _interval(estimate, reps, level, n)


def _equals(value: Any, equals: Any) -> bool:
    """A row's value against a column's ``equals``: one value, or a list of the values that count
    (Table 9's "C or D": the argmax token as each letter is written, with or without its space)."""
    return value in equals if isinstance(equals, list) else bool(value == equals)


def stat_cell(rows: Sequence[Mapping[str, Any]], column: Column) -> Cell:
    """A descriptive cell of one checkpoint: median / mean of a column over the selected rows (None
    and NaN left out), the share of rows whose column equals ``equals`` (a list: any of its values),
    or the number of rows."""
    chosen = select(rows, column.where)
    if column.stat == "count":  # the rows, or (with a column) those whose column equals ``equals`` (Table 16)
        hits = chosen if column.column is None else [r for r in chosen if _equals(r.get(column.column), column.equals)]
        return Cell(float(len(hits)), n=len(chosen))
    if column.stat in ("brier_constant", "brier_fitted"):  # Table 12: a constant forecast's Brier on these rows
        y = [x for x in (_number(r.get(column.target or "correct")) for r in chosen) if math.isfinite(x)]
        value = constant_brier(y, column.constant if column.stat == "brier_constant" else None)
        return Cell(value, n=len(y))
    if column.stat in ("doc_spearman", "doc_undefined"):  # App. G: within each document, then the mean over those that define it
        rho = np.asarray(list(_doc_rhos(chosen, column.column or "", column.target or "human").values()), dtype=np.float64)
        defined = int(np.isfinite(rho).sum())
        if column.stat == "doc_undefined":  # the documents where no rho exists (App. G's missing documents)
            return Cell(float(rho.size - defined), n=int(rho.size))
        return Cell(float(rho[np.isfinite(rho)].mean()) if defined else math.nan, n=defined)
    if column.stat in ("excess", "excess_share"):  # App. E: the group's hits beyond the others' rate, per stratum
        hit = [float(_equals(r.get(column.column or ""), column.equals)) for r in chosen]
        excess = stratified_excess(hit, [_number(r.get(column.group or "")) == 1.0 for r in chosen], [r.get(column.strata) if column.strata else "" for r in chosen])
        total = sum(hit)
        return Cell(excess if column.stat == "excess" else (excess / total if total else math.nan), n=len(chosen))
    values = [r.get(column.column or "") for r in chosen]
    if column.stat == "share":
        n = len(values)
        return Cell(sum(_equals(v, column.equals) for v in values) / n if n else math.nan, n=n)
    nums = np.asarray([x for x in (_number(v) for v in values) if math.isfinite(x)], dtype=np.float64)
    if not nums.size:
        return Cell(math.nan, n=0)
    if column.stat == "below":  # items under the floor (§3), a count
        return Cell(float(np.sum(nums < column.floor)), n=int(nums.size))
    if column.stat == "log_median":
        return Cell(log_median(list(nums)), n=int(nums.size))
    if column.stat in ("min", "max"):
        return Cell(float(nums.min() if column.stat == "min" else nums.max()), n=int(nums.size))
    return Cell(float(np.median(nums) if column.stat == "median" else nums.mean()), n=int(nums.size))


def loo_summary_cell(summary: Summary, rows: Sequence[TableRow], loo: Mapping[str, Mapping[str, Any]]) -> SummaryCell:
    """The lowest (``loo_min``) or highest (``loo_max``) of ``summary.average``'s estimates with one
    member left out, and that estimate's interval: App. E prints the range so. Undefined unless the
    average measured here is the config's own (not one renamed after other members)."""
    (key,) = summary.columns
    measured = any(r.kind == "average" and r.name == summary.average for r in rows)
    entry = loo.get(summary.average or "", {}).get(key) if measured else None
    if not entry:
        return SummaryCell(summary, math.nan, 0)
    without = {k: float(v) for k, v in entry["without"].items()}
    pick = (min if summary.how == "loo_min" else max)(without, key=lambda k: without[k])
    interval = (entry.get("intervals") or {}).get(pick) or {}
    return SummaryCell(summary, without[pick], len(without), _number(interval.get("low")), _number(interval.get("high")))


def summary_cell(summary: Summary, rows: Sequence[TableRow], loo: Mapping[str, Mapping[str, Any]] | None = None) -> SummaryCell:
    """``summary.how`` over the defined cells of its columns on the checkpoint rows (those of
    ``summary.average`` where it names one; a leave-one-out summary: over ``loo``, :func:`loo_summary_cell`)."""
    if summary.how in LOO_SUMMARIES:
        return loo_summary_cell(summary, rows, loo or {})
    names = {r.name for r in rows if r.kind == "checkpoint"}
    if summary.average is not None:  # the config's own average, measured here (else nothing to compare)
        names = {m for r in rows if r.kind == "average" and r.name == summary.average for m in r.members}
    cells = [r.cells[k] for r in rows if r.kind == "checkpoint" and r.name in names for k in summary.columns]
    cells = [c for c in cells if math.isfinite(c.estimate)]
    est = np.asarray([c.estimate for c in cells], dtype=np.float64)
    if not cells:
        value = math.nan
    elif summary.how in ("negative", "positive"):
        value = float(np.sum(est < 0) if summary.how == "negative" else np.sum(est > 0))
    elif summary.how == "below":  # cells under §3's floor (App. I: the stemmed medians below it)
        value = float(np.sum(est < MASS_FLOOR))
    elif summary.how == "excludes_zero":
        value = float(sum(1 for c in cells if (c.low > 0 or c.high < 0)))  # NaN bounds compare False
    else:
        value = float(est.min() if summary.how == "min" else est.max() if summary.how == "max" else est.sum())
    return SummaryCell(summary, value, len(cells))


def sum_cell(cells: Sequence[Cell]) -> Cell:
    """The sum over checkpoints (undefined when any member is), without an interval."""
    est = [c.estimate for c in cells]
    return Cell(float(np.sum(est)) if cells and all(math.isfinite(e) for e in est) else math.nan, n=len(cells))


def average_cell(cells: Sequence[Cell], level: float = 0.95) -> Cell:
    """The mean over checkpoints; with replicates (all on the same draws), the interval of the
    per-replicate means. Undefined when any member is."""
    if not cells:
        return Cell(math.nan)
    est = [c.estimate for c in cells]
    estimate = float(np.mean(est)) if all(math.isfinite(e) for e in est) else math.nan
    if any(c.replicates is None for c in cells):
        return Cell(estimate, n=len(cells))
    reps = np.mean(np.stack([np.asarray(c.replicates) for c in cells]), axis=0)
    return _interval(estimate, reps, level, len(cells))


def aggregate(
    config: TableConfig,
    checkpoints: Sequence[Checkpoint],
    readings: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
    *,
    averages: Sequence[Average] | None = None,
    B: int | None = None,
    seed: int | None = None,
    notes: Sequence[str] = (),
) -> TableResult:
    """The table: one row per checkpoint (``readings[checkpoint][run]`` its rows), then one per
    average whose members include at least one of ``checkpoints``; every bootstrapped cell on the
    shared replicates of its run (``B``, ``seed``: the config's unless given)."""
    B = config.B if B is None else B
    seed = config.seed if seed is None else seed
    names = [c.name for c in checkpoints]
    shared: dict[str, tuple[dict[str, int], NDArray[np.int64]]] = {}
    for run, spec in config.runs.items():
        if not config.runnable or not any(c.run == run and c.metric for c in config.columns):
            continue
        units = unit_index({k: readings[k].get(run, []) for k in names}, kinds.kind(spec.command).unit)
        shared[run] = (units, shared_counts(len(units), B, seed))
    rows: list[TableRow] = []
    for ck in checkpoints:
        cells: dict[str, Cell] = {}
        for col in config.columns:
            data = readings.get(ck.name, {}).get(col.run, [])
            if not col.run or not config.runnable:
                cells[col.key] = Cell(math.nan)
            elif col.metric is not None:
                units, counts = shared[col.run]
                cells[col.key] = metric_cell(data, col, config.kind(col.run), units, counts, config.level)
            else:
                cells[col.key] = stat_cell(data, col)
        rows.append(TableRow(ck.name, ck.shown, "checkpoint", (ck.name,), cells))
    by_name = {r.name: r for r in rows}
    loo: dict[str, dict[str, Any]] = {}
    for avg in config.averages if averages is None else averages:
        members = tuple(m for m in avg.select(checkpoints) if m in by_name)
        if not members:
            continue
        own = tuple(avg.select(config.checkpoints)) if config.checkpoints else members
        # an average over other checkpoints than the paper's is another row than the paper's (no difference)
        name = avg.name if members == own else f"{avg.name} of {', '.join(members)}"
        label = name if len(members) > 1 else f"{name} (1 checkpoint)"
        if avg.how == "sum":  # a count over checkpoints (Table 15): no interval, no leave-one-out
            rows.append(TableRow(name, label, "average", members, {col.key: sum_cell([by_name[m].cells[col.key] for m in members]) for col in config.columns}))
            continue
        cells = {col.key: average_cell([by_name[m].cells[col.key] for m in members], config.level) for col in config.columns}
        rows.append(TableRow(name, label, "average", members, cells))
        if len(members) >= 2:  # how much one checkpoint moves the average (leave-one-checkpoint-out, App. E)
            loo[avg.name] = {}
            for col in config.columns:
                mcells = {m: by_name[m].cells[col.key] for m in members}
                vals = {m: c.estimate for m, c in mcells.items()}
                if all(math.isfinite(v) for v in vals.values()):
                    shifts = leave_one_out(vals)
                    reps = {m: c.replicates for m, c in mcells.items()}
                    if all(r is not None for r in reps.values()):
                        shifts = dataclasses.replace(shifts, intervals=leave_one_out_intervals(reps, vals, config.level))
                    loo[avg.name][col.key] = shifts.as_json()
    # the paper's rows that are not measured here (other checkpoints given, or rows only the paper
    # prints): the published cells, beside the reproduced ones
    labels = {c.name: c.shown for c in config.checkpoints}
    order = [c.name for c in config.checkpoints] + [a.name for a in config.averages] + list(config.paper_rows)
    for extra in order:
        if extra not in {r.name for r in rows} and (extra in config.paper or extra in config.paper_rows):
            rows.append(TableRow(extra, f"{labels.get(extra, extra)} (paper)", "paper", (), {col.key: Cell(math.nan) for col in config.columns}))
    status = config.unreproducible or config.pending
    return TableResult(
        name=config.name, title=config.title, columns=config.columns, rows=tuple(rows), paper=config.paper, paper_ci=config.paper_ci,
        paper_rows=config.paper_rows, section=config.section, status=status,
        digits=config.digits, level=config.level, B=B, seed=seed, notes=tuple(notes), leave_one_out=loo,
        summaries=tuple(summary_cell(s, rows, loo) for s in config.summaries),
    )
