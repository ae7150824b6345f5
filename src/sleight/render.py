"""One rendering layer for every report: how a value reads in a cell, and Markdown/HTML tables.

Both instruments' reports (the Sleight of Word leaderboard, the audit, the scan, the downstream
and P(True) reports) format numbers through :func:`fmt`, so a missing value reads the same
everywhere (an em dash, never ``0.0``), percentages carry one decimal, other floats three, and a
Δ column its sign. Pure functions; no I/O.

May import: nothing of sleight.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
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


def interval(m: Mapping[str, Any] | None, digits: int = 3) -> str:
    """``estimate [low, high]`` of a metric record, or the missing mark."""
    if not m or is_missing(m.get("estimate")):
        return MISSING
    est = fmt(m.get("estimate"), digits=digits)
    if is_missing(m.get("low")) or is_missing(m.get("high")):
        return est
    return f"{est} [{fmt(m.get('low'), digits=digits)}, {fmt(m.get('high'), digits=digits)}]"


def md_cell(v: Any, column: str = "") -> str:
    return fmt(v, column).replace("|", "\\|").replace("\n", "\\n")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A pipe table (one line per row), each cell through :func:`fmt`."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]
    return out


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], raw: bool = False) -> str:
    """An HTML table; ``raw`` cells are already HTML (badges, links), others are formatted and escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if raw else html.escape(fmt(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
