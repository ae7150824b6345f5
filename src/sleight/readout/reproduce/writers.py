"""A :class:`~sleight.readout.reproduce.aggregate.TableResult` as Markdown, CSV and LaTeX (pure).

The layout is the paper's: one row per checkpoint, then the averages; per measured column the value
with its percentile interval (``0.612 [0.553, 0.671]``) and, beside it, the paper's number where the
config gives one ("—" where it does not). A value that is undefined (an AUROC with one class) is "—"
too. The CSV holds every number at full precision with the interval, the row count and the paper's
value in columns of their own.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping

from sleight.readout.reproduce.aggregate import Cell, TableResult

DASH = "—"
PAPER = "paper"


def _num(x: float | None, digits: int) -> str:
    return DASH if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def cell_text(cell: Cell, digits: int, *, count: bool = False) -> str:
    """``0.612 [0.553, 0.671]``; no interval for a descriptive cell; "—" when undefined."""
    if not math.isfinite(cell.estimate):
        return DASH
    if count:
        return str(int(cell.estimate))
    text = _num(cell.estimate, digits)
    if math.isfinite(cell.low) and math.isfinite(cell.high):
        text += f" [{_num(cell.low, digits)}, {_num(cell.high, digits)}]"
    return text


def _paper(paper: Mapping[str, Mapping[str, float]], row: str, key: str, digits: int) -> str:
    v = paper.get(row, {}).get(key)
    return DASH if v is None else _num(v, digits)


def _grid(table: TableResult) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The header and, per row, (kind, cells) as display text."""
    header = ["Checkpoint"]
    for col in table.columns:
        header += [col.label, PAPER]
    body = []
    for row in table.rows:
        cells = [row.label]
        for col in table.columns:
            cells += [cell_text(row.cells[col.key], table.digits, count=col.stat == "count"), _paper(table.paper, row.name, col.key, table.digits)]
        body.append((row.kind, cells))
    return header, body


def _caption(table: TableResult) -> str:
    return (
        f"Intervals: {round(table.level * 100)}% percentile bootstrap, {table.B} replicates (seed {table.seed}) shared by every "
        "checkpoint of a run; averages are means over checkpoints on the same replicates. paper: the paper's value where known."
    )


def to_markdown(table: TableResult) -> str:
    header, body = _grid(table)

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"# {table.title}", "", line(header), "|" + "|".join("---" for _ in header) + "|"]
    out += [line(cells) for _kind, cells in body]
    out += ["", _caption(table)]
    out += [f"- {n}" for n in table.notes]
    return "\n".join(out) + "\n"


def to_csv(table: TableResult) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header = ["row", "label", "kind", "members"]
    for col in table.columns:
        header += [col.key, f"{col.key}_low", f"{col.key}_high", f"{col.key}_n", f"{col.key}_paper"]
    w.writerow(header)

    def num(x: float | None) -> str:
        return "" if x is None or not math.isfinite(x) else repr(float(x))

    for row in table.rows:
        rec = [row.name, row.label, row.kind, ";".join(row.members)]
        for col in table.columns:
            c = row.cells[col.key]
            rec += [num(c.estimate), num(c.low), num(c.high), "" if c.n is None else str(c.n), num(table.paper.get(row.name, {}).get(col.key))]
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
        r"\begin{tabular}{l" + "rr" * len(table.columns) + "}",
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


WRITERS = {"table.md": to_markdown, "table.csv": to_csv, "table.tex": to_latex}
