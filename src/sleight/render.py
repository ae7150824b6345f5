"""One rendering layer for every report: how a value reads in a cell, Markdown/HTML tables, and
reports built as blocks.

Both instruments' reports (the Sleight of Word leaderboard, the audit, the scan, the downstream
and P(True) reports) format numbers through :func:`fmt`, so a missing value reads the same
everywhere (an em dash, never ``0.0`` or "n/a"), percentages carry one decimal, other floats three,
and a Δ column its sign. A report made of blocks (:class:`Report`: headings, paragraphs, tables,
figures, code) renders to Markdown and to a self-contained HTML page from the same blocks, so the
two never disagree. Pure functions; no I/O but reading a figure to embed it (files are written,
atomically, by :func:`sleight.rundir.write_text`).

May import: nothing of sleight.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MISSING = "—"


def is_missing(v: Any) -> bool:
    """None, NaN and pandas' NA: a value that was not measured (never shown as a number)."""
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    return type(v).__name__ == "NAType"


def fmt(v: Any, column: str = "", digits: int = 3) -> str:
    """One value as a cell: ``%`` columns to one decimal, ``Δ`` columns signed, floats to ``digits``."""
    if is_missing(v):
        return MISSING
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) or type(v).__name__.startswith("float"):
        x = float(v)
        if "%" in column:
            return f"{x:.1f}"
        return f"{x:+.{digits}f}" if column.startswith("Δ") else f"{x:.{digits}f}"
    if isinstance(v, Mapping):
        return ", ".join(f"{k} {fmt(x)}" for k, x in v.items() if x not in (0, None)) or MISSING
    return str(v)


def interval(m: Mapping[str, Any] | None, digits: int = 3, key: str = "estimate") -> str:
    """``estimate [low, high]`` of a metric record (``key``: the estimate's field, e.g. ``diff``),
    or the missing mark."""
    if not m or is_missing(m.get(key)):
        return MISSING
    est = fmt(m.get(key), digits=digits)
    if is_missing(m.get("low")) or is_missing(m.get("high")):
        return est
    return f"{est} [{fmt(m.get('low'), digits=digits)}, {fmt(m.get('high'), digits=digits)}]"


def top_count(c: Mapping[str, int] | None) -> str:
    """``answer_letter 27/28``: the first (most common) value of a count and its share."""
    if not c:
        return MISSING
    key = next(iter(c))
    return f"{key} {c[key]}/{sum(c.values())}"


def md_cell(v: Any, column: str = "") -> str:
    return fmt(v, column).replace("|", "\\|").replace("\n", "\\n")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[str] = ()) -> list[str]:
    """A pipe table (one line per row), each cell through :func:`fmt`; ``right``: columns aligned right."""
    out = ["| " + " | ".join(md_cell(h) for h in headers) + " |", "|" + "|".join("---:" if h in right else "---" for h in headers) + "|"]
    out += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]
    return out


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], raw: bool = False) -> str:
    """An HTML table; ``raw`` cells are already HTML (badges, links), others are formatted and escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if raw else html.escape(fmt(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# ------------------------------------------------------------------------------------------------
# reports as blocks
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Table:
    headers: Sequence[str]
    rows: Sequence[Sequence[Any]]  # cells through fmt (text passes unchanged)
    note: str = ""


@dataclass(frozen=True)
class Figure:
    file: str  # relative to the report's folder
    caption: str


@dataclass(frozen=True)
class Code:
    text: str


@dataclass
class Report:
    title: str
    blocks: list[Any] = field(default_factory=list)

    def add(self, *blocks: Any) -> None:
        self.blocks.extend(blocks)


def to_markdown(report: Report) -> str:
    out = [f"# {report.title}", ""]
    for b in report.blocks:
        if isinstance(b, Heading):
            out += [f"{'#' * b.level} {b.text}", ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Table):
            out += [*md_table(b.headers, b.rows), ""]
            if b.note:
                out += [b.note, ""]
        elif isinstance(b, Figure):
            out += [f"![{b.caption}]({b.file})", "", f"*{b.caption}*", ""]
        elif isinstance(b, Code):
            fence = "````" if "```" in b.text else "```"
            out += [fence, b.text, fence, ""]
    return "\n".join(out).rstrip() + "\n"


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:68rem;margin:2rem auto;padding:0 1rem;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.92rem}
th,td{border:1px solid #ccc;padding:.25rem .55rem;text-align:right;vertical-align:top}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;white-space:pre-wrap}
figure{margin:1rem 0}figcaption{font-size:.9rem;color:#555}img{max-width:100%}
.note{font-size:.9rem;color:#555}
"""


def inline_html(text: str) -> str:
    """Escape, then the two Markdown marks the reports use: `code` and **bold**."""
    s = html.escape(text)
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)


def to_html(report: Report, folder: Path | None = None) -> str:
    """A standalone page; figures found in ``folder`` are embedded as data URIs."""
    title = html.escape(report.title)
    out = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{title}</title>", f"<style>{CSS}</style></head><body>", f"<h1>{title}</h1>"]
    for b in report.blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{inline_html(b.text)}</p>")
        elif isinstance(b, Table):
            out.append(html_table(b.headers, [[inline_html(fmt(c)) for c in r] for r in b.rows], raw=True))
            if b.note:
                out.append(f'<p class="note">{inline_html(b.note)}</p>')
        elif isinstance(b, Figure):
            src = b.file
            path = (folder / b.file) if folder else None
            if path is not None and path.is_file():
                src = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
            out.append(f'<figure><img src="{src}" alt="{html.escape(b.caption)}"><figcaption>{html.escape(b.caption)}</figcaption></figure>')
        elif isinstance(b, Code):
            out.append(f"<pre>{html.escape(b.text)}</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
