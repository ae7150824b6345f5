"""scan.md and scan.html: one row per scorer preset (the shape of the study's Table 11).

Rendering only: every number comes from :func:`sleight.readout.scan.run.scan_row` (a
:class:`~sleight.readout.scan.records.ScanRow`). Each row links to its preset's audit report
(``<preset>/report.html``), the drill-down with the six checks.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from sleight import rundir
from sleight.readout.audit.report import VERDICT_MARK, badge
from sleight.readout.scan.records import PositionSummary, ScanRow, ScanSummary
from sleight.render import fmt, md_table

HEADERS = (
    "preset", "rendering", "parser", "mass as declared", "mass, leading space", "first tokens distinct (declared / spaced)",
    "separator present", "argmax class", "continuation first", "verdict", "repair", "repair mass", "repair clears floor",
)


def _mass(d: PositionSummary) -> str:
    extra = f" ({d.mass_null} undefined)" if d.mass_null else ""
    return fmt(d.mass_median) + extra


def cells(row: ScanRow) -> list[str]:
    """The row's cells as text, in :data:`HEADERS` order (the preset cell without its link)."""
    flags = "; ".join(row.flags)
    verdict = VERDICT_MARK[row.verdict] + (f": {flags}" if flags else "")
    return [
        row.preset,
        row.rendering,
        row.parser,
        _mass(row.declared),
        _mass(row.spaced),
        f"{fmt(row.declared.distinct_rate)} / {fmt(row.spaced.distinct_rate)}",
        fmt(row.separator_rate),
        fmt(row.argmax_class),
        fmt(row.continuation),
        verdict,
        row.repair.description,
        _mass(row.repair.position),
        fmt(row.repair.position.clears_floor),
    ]


def render_scan_markdown(summary: ScanSummary, rows: Sequence[ScanRow]) -> str:
    model = summary.model
    lines = [
        "# Readout scan of published scorers",
        "",
        f"Model: `{model.get('model_id', '?')}` ({model.get('engine', '?')}, {model.get('dtype', '?')}, {model.get('device', '?')}); "
        f"floor {summary.floor}; records per preset: {summary.limit or 'all'}.",
        "Masses are medians over the items at the scored position (SPEC §4.1); distinct is the share of items whose options have their own first token.",
        "",
    ]
    table = []
    for r in rows:
        c = cells(r)
        c[0] = f"[{r.preset}]({r.report.replace(chr(92), '/')})"
        table.append(c)
    lines += md_table(HEADERS, table)
    lines += ["", "## Flags", ""]
    lines += [f"- **{k}**: {v}." for k, v in summary.flag_rules.items()]
    for r in rows:
        lines += ["", f"## {r.preset}: {r.title}", ""]
        s = r.source
        lines.append(f"Source: {s.paper} ({s.url})" + (f"; `{s.repo}` {', '.join('`' + f + '`' for f in s.files)} at `{s.revision}`" if s.repo else "") + ".")
        lines.append(f"Declared options {list(r.options)!r} ({r.label_format}); parser: {r.parser_note}.")
        lines.append(f"Argmax classes {dict(r.argmax_classes)}; continuation classes {dict(r.continuation_classes)}.")
        if r.parser_result is not None and r.parser_result.contrast is not None and r.parser_result.contrast.per_letter:
            p = r.parser_result.contrast
            by_gold = {g: dict(vs) for g, vs in p.verdicts_by_gold.items()}
            lines.append(
                f"Parsed verdicts: accuracy {fmt(p.accuracy)} (every prediction is correct), verdict = gold letter {fmt(p.letter_rate)} "
                f"when the gold letter is A or B, rotation contrast {fmt(p.contrast)}; items read as verdicts: {', '.join(p.tracking_items) or 'none'}; "
                f"verdicts by gold position {by_gold}."
            )
        if r.grades is not None:
            g = r.grades
            d = g.difference
            lines.append(
                f"Grades against human ratings (within-document Spearman, averaged): as declared, first token {fmt(g.declared_first_token.rho)} "
                f"({g.declared_first_token.n_undefined} of {g.declared_first_token.n_documents} documents undefined); "
                f"space-prefixed, full sequence {fmt(g.spaced_full_sequence.rho)} ({g.spaced_full_sequence.n_undefined} undefined); "
                f"difference {fmt(d.diff)} [{fmt(d.low)}, {fmt(d.high)}] over {d.n_paired} paired documents."
            )
        lines.append(f"Drill-down: [{r.report}]({r.report}).")
    return "\n".join(lines) + "\n"


def render_scan_html(summary: ScanSummary, rows: Sequence[ScanRow]) -> str:
    model = summary.model
    css = (
        "body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#1f2328}"
        "table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:3px 8px;font-size:14px;text-align:left;vertical-align:top}"
        "th{background:#f6f8fa}.badge{color:#fff;border-radius:4px;padding:1px 7px;font-weight:600;font-size:13px}"
    )
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    body = []
    for r in rows:
        c = [html.escape(x) for x in cells(r)]
        c[0] = f'<a class="drill" href="{html.escape(r.report.replace(chr(92), "/"))}">{html.escape(r.preset)}</a>'
        flags = "; ".join(r.flags)
        c[9] = f"{badge(r.verdict)} {html.escape(flags)}"
        body.append(f'<tr data-preset="{html.escape(r.preset)}" data-verdict="{r.verdict}">' + "".join(f"<td>{x}</td>" for x in c) + "</tr>")
    sources = "".join(
        f"<li><b>{html.escape(r.preset)}</b>: {html.escape(r.source.paper)} (<a href=\"{html.escape(r.source.url)}\">{html.escape(r.source.url)}</a>)"
        + (f"; <code>{html.escape(r.source.repo)}</code> {html.escape(', '.join(r.source.files))} at <code>{html.escape(str(r.source.revision))}</code>" if r.source.repo else "")
        + "</li>"
        for r in rows
    )
    rules = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}.</li>" for k, v in summary.flag_rules.items())
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Readout scan</title><style>{css}</style></head><body>"
        "<h1>Readout scan of published scorers</h1>"
        f"<p>Model <code>{html.escape(str(model.get('model_id', '?')))}</code> ({html.escape(str(model.get('engine', '?')))}, {html.escape(str(model.get('device', '?')))}); "
        f"floor {html.escape(str(summary.floor))}. Each preset links to its audit report.</p>"
        f"<table id='scan'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"<h2>Flags</h2><ul>{rules}</ul><h2>Sources</h2><ul>{sources}</ul></body></html>"
    )


def write_scan_reports(out_dir: str | Path, summary: ScanSummary, rows: Sequence[ScanRow]) -> tuple[Path, Path]:
    out = Path(out_dir)
    md, page = out / "scan.md", out / "scan.html"
    rundir.write_text(md, render_scan_markdown(summary, rows))
    rundir.write_text(page, render_scan_html(summary, rows))
    return md, page
