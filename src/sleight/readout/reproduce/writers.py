"""A :class:`~sleight.readout.reproduce.aggregate.TableResult` as Markdown, CSV and LaTeX (pure).

The layout is the paper's rows (one per checkpoint, then the averages, then any row the paper prints
that is not measured here) with, per column, three cells side by side: the reproduced value with its
percentile interval (``0.612 [0.553, 0.671]``), the published value (with its printed interval where
the paper prints one), and the difference reproduced − published. Every value is formatted by
:func:`sleight.render.fmt` (the one renderer: a missing value is "—"); the Markdown table is
:func:`sleight.render.md_table`. The CSV holds every number at full precision in columns of its own.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable

from sleight.readout.reproduce.aggregate import Cell, SummaryCell, TableResult
from sleight.readout.reproduce.config import LOO_SUMMARIES
from sleight.render import MISSING, fmt, md_table

DASH = MISSING
REPRODUCED, PUBLISHED, DIFFERENCE = "reproduced", "published", "difference"


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def cell_text(cell: Cell, digits: int, *, count: bool = False) -> str:
    """``0.612 [0.553, 0.671]``; no interval for a descriptive cell; "—" when undefined."""
    if not _finite(cell.estimate):
        return DASH
    if count:
        return str(int(cell.estimate))
    text = number_text(cell.estimate, digits)
    if _finite(cell.low) and _finite(cell.high):
        text += f" [{number_text(cell.low, digits)}, {number_text(cell.high, digits)}]"
    return text


def number_text(x: float | None, digits: int, *, signed: bool = False) -> str:
    """A number as the paper prints it: ``digits`` decimals, or scientific notation below 1e-3."""
    if not _finite(x):
        return DASH
    assert x is not None
    if x != 0 and abs(x) < 1e-3:
        return f"{x:+.2e}" if signed else f"{x:.2e}"
    return fmt(float(x), "Δ" if signed else "", digits)


def published(table: TableResult, row: str, key: str) -> float | None:
    return table.paper.get(row, {}).get(key)


def published_text(table: TableResult, row: str, key: str, *, count: bool = False) -> str:
    v = published(table, row, key)
    if v is None:
        return DASH
    if count:
        return str(int(v))
    text = number_text(v, table.digits)
    ci = table.paper_ci.get(row, {}).get(key)
    if ci is not None:
        text += f" [{number_text(ci[0], table.digits)}, {number_text(ci[1], table.digits)}]"
    return text


def difference(cell: Cell, paper: float | None) -> float | None:
    """Reproduced − published, where both exist."""
    return cell.estimate - paper if paper is not None and _finite(cell.estimate) else None


def _grid(table: TableResult) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The header and, per row, (kind, cells) as display text."""
    header = ["Row"]
    for col in table.columns:
        header += [f"{col.label} ({REPRODUCED})", PUBLISHED, DIFFERENCE]
    body = []
    for row in table.rows:
        cells = [row.label]
        for col in table.columns:
            c = row.cells[col.key]
            count = col.integer
            d = difference(c, published(table, row.name, col.key))
            cells += [cell_text(c, table.digits, count=count), published_text(table, row.name, col.key, count=count), number_text(d, table.digits, signed=True)]
        body.append((row.kind, cells))
    return header, body


def _summary_grid(table: TableResult) -> tuple[list[str], list[list[str]]]:
    """The summaries across cells: what each counts, reproduced, published, difference, cells read."""
    header = ["Across the checkpoints' cells", REPRODUCED, PUBLISHED, DIFFERENCE, "cells"]
    body = []
    for sc in table.summaries:
        count = sc.summary.how not in ("min", "max", *LOO_SUMMARIES) or all(c.integer for c in table.columns if c.key in sc.summary.columns)
        d = summary_difference(sc)
        cells = [_summary_text(x, table.digits, count=count) for x in (sc.value, sc.summary.paper)]
        ci = ((sc.low, sc.high), sc.summary.paper_ci or (math.nan, math.nan))
        cells = [t + (f" [{number_text(lo, table.digits)}, {number_text(hi, table.digits)}]" if _finite(lo) and _finite(hi) and t != DASH else "") for t, (lo, hi) in zip(cells, ci)]
        body.append([sc.summary.label, *cells, _summary_text(d, table.digits, count=count, signed=True), str(sc.n)])
    return header, body


def _summary_text(x: float | None, digits: int, *, count: bool, signed: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return DASH
    if count:
        return f"{int(x):+d}" if signed else str(int(x))
    return number_text(x, digits, signed=signed)


def summary_difference(sc: SummaryCell) -> float | None:
    """Reproduced − published for a summary, where both exist."""
    return sc.value - sc.summary.paper if sc.summary.paper is not None and _finite(sc.value) else None


def _caption(table: TableResult) -> str:
    text = (
        f"{table.section}. Intervals: {round(table.level * 100)}% percentile bootstrap, {table.B} replicates (seed {table.seed}) shared by every "
        "checkpoint of a run; averages are means over checkpoints on the same replicates. published: the paper's printed value; "
        "difference: reproduced − published."
    )
    if table.status:
        text += f" Not reproduced: {table.status}"
    return text


def to_markdown(table: TableResult) -> str:
    header, body = _grid(table)
    out = [f"# {table.title}", "", *md_table(header, [cells for _kind, cells in body]), "", _caption(table)]
    if table.summaries:
        out += ["", *md_table(*_summary_grid(table))]
    out += [f"- {n}" for n in table.notes]
    return "\n".join(out) + "\n"


def to_csv(table: TableResult) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header = ["row", "label", "kind", "members"]
    for col in table.columns:
        header += [col.key, f"{col.key}_low", f"{col.key}_high", f"{col.key}_n", f"{col.key}_published", f"{col.key}_difference"]
    w.writerow(header)

    def num(x: float | None) -> str:
        return repr(float(x)) if x is not None and math.isfinite(x) else ""

    for row in table.rows:
        rec = [row.name, row.label, row.kind, ";".join(row.members)]
        for col in table.columns:
            c = row.cells[col.key]
            p = published(table, row.name, col.key)
            rec += [num(c.estimate), num(c.low), num(c.high), "" if c.n is None else str(c.n), num(p), num(difference(c, p))]
        w.writerow(rec)
    return buf.getvalue()


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex_escape(text: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in text).replace(DASH, "--")


def to_latex(table: TableResult) -> str:
    header, body = _grid(table)
    out = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{tex_escape(table.title)}. {tex_escape(_caption(table))}}}",
        rf"\label{{tab:{tex_escape(table.name)}}}",
        r"\begin{tabular}{l" + "rrr" * len(table.columns) + "}",
        r"\toprule",
        " & ".join(tex_escape(h) for h in header) + r" \\",
        r"\midrule",
    ]
    previous = "checkpoint"
    for kind, cells in body:
        if kind != previous:
            out.append(r"\midrule")
            previous = kind
        out.append(" & ".join(tex_escape(c) for c in cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(out) + "\n"


WRITERS: dict[str, Callable[[TableResult], str]] = {"table.md": to_markdown, "table.csv": to_csv, "table.tex": to_latex}
