"""report.md and report.html for an audit: the six checks, their worked examples, the variants.

Rendering only: every number comes from :mod:`.checks`; nothing is recomputed here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sleight import rundir
from sleight.errors import UserError
from sleight.readout.audit.checks import Check, VariantRow, WorkedExample, variant_table
from sleight.readout.audit.manifest import AuditManifest, AuditRunConfig
from sleight.readout.audit.summary import AuditSummary, PTrueSection, VariantSummary
from sleight.render import MISSING, fmt, html_table, interval, md_table, top_count

VERDICT_MARK = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skipped": "SKIPPED"}
_COLOURS = {"pass": "#1a7f37", "warn": "#9a6700", "fail": "#cf222e", "skipped": "#57606a"}




VARIANT_COLUMNS = (
    ("variant", "variant"), ("measured", "measured"), ("skipped", "skipped"), ("mass_median", "median mass"), ("mass_min", "min mass"),
    ("below_floor", "below floor"), ("mass_null", "no mass"), ("mass_interval", "interval mass"), ("mass_undecided", "undecided"),
    ("letter_rate", "letter rate"), ("option_argmax_rate", "option argmax"), ("on_task_rate", "on task"), ("score_mean", "mean score"),
    ("downstream", "downstream"),
)  # fmt: skip
INTERVAL_COLUMNS = ("mass_interval", "mass_undecided")  # shown only where a server read some mass as an interval


def _variant_columns(table: list[VariantRow]) -> tuple[list[str], list[str]]:
    """The variant table's keys and headers (the interval columns only where a row has one)."""
    shown = [(k, h) for k, h in VARIANT_COLUMNS if k not in INTERVAL_COLUMNS or any(getattr(r, k) for r in table)]
    return [k for k, _ in shown], [h for _, h in shown]


def _example_md(ex: WorkedExample) -> list[str]:
    lines = [f"Worked example: item `{ex.item_id}`, variant `{ex.variant}`.", ""]
    if ex.original_ending is not None and ex.variant != "original":
        lines += ["Original ending:", "", "```", repr(ex.original_ending), "```", ""]
    lines += ["Rendered ending (last 80 characters, as a Python string):", "", "```", repr(ex.ending), "```", ""]
    lines += ["Top next tokens:", ""]
    lines += md_table(["token", "id", "prob"], [[repr(t["token"]), t["id"], t["prob"]] for t in ex.top_tokens])
    lines += ["", f"Options' mass: {fmt(ex.option_mass)} (boundary preserved: {fmt(ex.boundary_preserved)})", ""]
    lines += md_table(["option", "first token id", "p(first token)"], [[repr(o.option), o.first_token_id, o.prob] for o in ex.options])
    lines += ["", f"Argmax: {ex.argmax_token!r} ({ex.argmax_class}).", ""]
    lines += [f"Unrestricted continuation ({ex.continuation_class}):", "", "```", repr(ex.continuation), "```", ""]
    return lines


def render_markdown(manifest: AuditManifest, summary: AuditSummary, checks: Sequence[Check], extra: Sequence[str] = ()) -> str:
    """The audit report as Markdown."""
    model = manifest.get("model", {})
    cfg = manifest.get("config", {})
    lines = [
        "# Readout audit",
        "",
        f"Model: `{model.get('model_id', '?')}` ({model.get('engine', '?')}, {model.get('dtype', '?')}, {model.get('device', '?')}); "
        f"chat template sha256 `{str(model.get('chat_template_sha256', ''))[:12]}`.",
        f"Items: {cfg.get('n_items', '?')} ({cfg.get('source', '?')}); options {cfg.get('options') or 'per item'}; "
        f"{stem_text(cfg, summary)}; floor {summary.floor}; {cfg.get('max_new_tokens', 16)} new tokens per continuation.",
        "",
        "## Verdicts",
        "",
    ]
    lines += md_table(["#", "check", "verdict", "why"], [[c.number, c.name, VERDICT_MARK[c.verdict], c.reason] for c in checks])
    for c in checks:
        lines += ["", f"## {c.number}. {c.name}: {VERDICT_MARK[c.verdict]}", "", c.reason, ""]
        if c.evidence:
            lines += md_table(["evidence", "value"], [[k, v] for k, v in c.shown_evidence().items()])
            lines.append("")
        if c.sub:
            lines += ["Checks 1-4 repeated at the stem:", ""]
            lines += md_table(["check", "verdict", "why"], [[s.check, VERDICT_MARK[s.verdict], s.reason] for s in c.sub])
            lines.append("")
        if c.example:
            lines += _example_md(c.example)
    lines += ["## Variants (interventions)", ""]
    table = variant_table(summary)
    keys, headers = _variant_columns(table)
    lines += md_table(headers, [[getattr(r, k) for k in keys] for r in table])
    skipped = {v: s.skip_reasons for v, s in summary.variants.items() if s.skip_reasons}
    if skipped:
        lines += ["", "Skipped variants: " + "; ".join(f"`{v}`: {', '.join(r)}" for v, r in skipped.items()) + "."]
    lines += ["", "Continuation classes per variant:", ""]
    lines += md_table(["variant", *CLASS_COLUMNS, "answer then grid", "grid anywhere"], _class_rows(summary))
    if summary.ptrue:
        lines += ["", "## P(True) readouts", "", PTRUE_NOTE.format(rendering=_ptrue_rendering(summary.ptrue)), ""]
        lines += md_table(PTRUE_HEAD, _ptrue_rows(summary.ptrue))
    lines += list(extra)
    lines += ["", "Definitions: SPEC §4.1; the rules behind every verdict and class are in `sleight.readout.audit.checks` and `sleight.readout.audit.classify`.", ""]
    return "\n".join(lines)


CLASS_COLUMNS = ("answers_item", "forecast", "recites", "prose", "other")


def _class_rows(summary: AuditSummary) -> list[list[Any]]:
    """Per variant: its continuation classes, then its answer-then-grid and grid-anywhere counts."""
    return [
        [v, *[(s.continuation_classes or {}).get(c) for c in CLASS_COLUMNS], s.answer_then_grid, s.grid_anywhere]
        for v, s in summary.variants.items()
    ]


def stem_text(cfg: AuditRunConfig, summary: AuditSummary) -> str:
    """The header's stem: the run's, the items' own, or none (never "stem None")."""
    if cfg.get("stem"):
        return f"answer stem {cfg['stem']!r}"
    if summary.variant("stem").n_measured:
        return "answer stems per item"
    if "stem" in (cfg.get("variants") or summary.variants):
        return "no answer stem (the stem variant is skipped)"
    return "no answer stem"


PTRUE_HEAD = ["readout", "n", "AUROC [95% CI]", "PRR [95% CI]", "options", "median mass", "argmax class"]
PTRUE_NOTE = (
    "The prompt {rendering}; the rows are in ptrue.parquet, the same records `sleight readout ptrue --answers constructed` "
    "writes. Library is lm-polygraph 0.7.0's own number (log P(True), EOS masked); the others are probabilities. "
    "Intervals: cluster bootstrap over questions."
)


def _ptrue_rendering(section: PTrueSection) -> str:
    return "as one user turn through the chat template" if section.instruct else "as a raw string, no chat template"


def _ptrue_rows(section: PTrueSection) -> list[list[Any]]:
    rows = []
    for name, r in (section.setting.get("readouts") or {}).items():
        mass = (r.get("mass") or {}).get("median")
        rows.append([r.get("label", name), r.get("n_scored"), interval(r.get("auroc")), interval(r.get("prr")), " / ".join(r.get("options") or []), mass, top_count(r.get("argmax_class"))])
    return rows


def _h(v: Any) -> str:
    return html.escape(fmt(v))




def badge(verdict: str) -> str:
    """A verdict as a coloured HTML badge (the audit report and the scan)."""
    return f'<span class="badge" style="background:{_COLOURS[verdict]}">{VERDICT_MARK[verdict]}</span>'


def _example_html(ex: WorkedExample) -> str:
    parts = [f"<p>Worked example: item <code>{html.escape(str(ex.item_id))}</code>, variant <code>{html.escape(ex.variant)}</code>.</p>"]
    if ex.original_ending is not None and ex.variant != "original":
        parts.append(f"<p>Original ending:</p><pre>{html.escape(repr(ex.original_ending))}</pre>")
    parts.append(f"<p>Rendered ending:</p><pre>{html.escape(repr(ex.ending))}</pre>")
    parts.append("<p>Top next tokens:</p>" + html_table(["token", "id", "prob"], [[repr(t["token"]), t["id"], t["prob"]] for t in ex.top_tokens]))
    parts.append(f"<p>Options' mass: <b>{_h(ex.option_mass)}</b> (boundary preserved: {_h(ex.boundary_preserved)})</p>")
    parts.append(html_table(["option", "first token id", "p(first token)"], [[repr(o.option), o.first_token_id, o.prob] for o in ex.options]))
    parts.append(f"<p>Argmax: <code>{html.escape(repr(ex.argmax_token))}</code> ({html.escape(str(ex.argmax_class))}).</p>")
    parts.append(f"<p>Unrestricted continuation ({html.escape(str(ex.continuation_class))}):</p><pre>{html.escape(repr(ex.continuation))}</pre>")
    return "".join(parts)


def render_html(manifest: AuditManifest, summary: AuditSummary, checks: Sequence[Check], extra_html: str = "") -> str:
    """The audit report as one self-contained HTML page."""
    model = manifest.get("model", {})
    cfg = manifest.get("config", {})
    css = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#1f2328}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #d0d7de;padding:3px 8px;font-size:14px;text-align:left}"
        "th{background:#f6f8fa}pre{background:#f6f8fa;padding:.5em;white-space:pre-wrap;word-break:break-all}"
        ".badge{color:#fff;border-radius:4px;padding:1px 7px;font-weight:600;font-size:13px}section{border-top:1px solid #d0d7de;margin-top:1.5em}"
    )
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>Readout audit</title><style>{css}</style></head><body>",
        "<h1>Readout audit</h1>",
        f"<p>Model <code>{html.escape(str(model.get('model_id', '?')))}</code> ({html.escape(str(model.get('engine', '?')))}, "
        f"{html.escape(str(model.get('dtype', '?')))}, {html.escape(str(model.get('device', '?')))}). Items: {html.escape(str(cfg.get('n_items', '?')))} "
        f"({html.escape(str(cfg.get('source', '?')))}); options {html.escape(str(cfg.get('options') or 'per item'))}; {html.escape(stem_text(cfg, summary))}; floor {summary.floor}.</p>",
        "<h2>Verdicts</h2>",
        html_table(["#", "check", "verdict", "why"], [[c.number, html.escape(c.name), badge(c.verdict), html.escape(c.reason)] for c in checks], raw=True),
    ]
    for c in checks:
        parts.append(f"<section><h2>{c.number}. {html.escape(c.name)} {badge(c.verdict)}</h2><p>{html.escape(c.reason)}</p>")
        if c.evidence:
            parts.append(html_table(["evidence", "value"], [[k, v] for k, v in c.shown_evidence().items()]))
        if c.sub:
            parts.append("<p>Checks 1-4 repeated at the stem:</p>" + html_table(["check", "verdict", "why"], [[html.escape(s.check), badge(s.verdict), html.escape(s.reason)] for s in c.sub], raw=True))
        if c.example:
            parts.append(_example_html(c.example))
        parts.append("</section>")
    table = variant_table(summary)
    keys, headers = _variant_columns(table)
    parts.append("<section><h2>Variants (interventions)</h2>")
    parts.append(html_table(headers, [[getattr(r, k) for k in keys] for r in table]))
    parts.append("<p>Continuation classes per variant:</p>" + html_table(["variant", *CLASS_COLUMNS, "answer then grid", "grid anywhere"], _class_rows(summary)))
    parts.append("</section>")
    if summary.ptrue:
        parts.append(f"<section><h2>P(True) readouts</h2><p>{html.escape(PTRUE_NOTE.format(rendering=_ptrue_rendering(summary.ptrue)))}</p>")
        parts.append(html_table(PTRUE_HEAD, _ptrue_rows(summary.ptrue)) + "</section>")
    parts.append(extra_html + "</body></html>")
    return "".join(parts)


def write_reports(out_dir: str | Path, manifest: AuditManifest, summary: AuditSummary, checks: Sequence[Check], extra_md: Sequence[str] = (), extra_html: str = "") -> tuple[Path, Path]:
    """Write report.md and report.html (atomically) and return their paths."""
    out = Path(out_dir)
    md, page = out / "report.md", out / "report.html"
    rundir.write_text(md, render_markdown(manifest, summary, checks, extra_md))
    rundir.write_text(page, render_html(manifest, summary, checks, extra_html))
    return md, page


# ------------------------------------------------------------------------------------------------
# two audits side by side (``sleight readout compare``)
# ------------------------------------------------------------------------------------------------

COMPARE_KEYS = (  # (VariantSummary field, column)
    ("mass_median", "median mass"),
    ("mass_below_floor", "below floor"),
    ("mass_null", "no mass"),
    ("answer_letter_rate", "letter rate"),
    ("option_argmax_rate", "option argmax"),
    ("on_task_rate", "on task"),
    ("score_mean", "mean score"),
)


def load_summary(folder: Path) -> AuditSummary:
    """An audit directory's summary.json; one line when there is none or it is damaged."""
    path = Path(folder) / "summary.json"
    if not path.is_file():
        raise UserError(f"{folder} is not an audit directory (no summary.json)")
    return AuditSummary.from_json(rundir.read_json(path))


def _downstream(s: VariantSummary) -> str:
    d = s.downstream
    return f"{d.metric} {fmt(d.value)}" if d else MISSING


def compare_markdown(a: Path, b: Path) -> str:
    """Two audits' variant tables side by side (values as ``a / b``), then their checks' verdicts."""
    sa, sb = load_summary(a), load_summary(b)
    head = ["variant", *[label for _, label in COMPARE_KEYS], "downstream"]
    rows = []
    for v in dict.fromkeys([*sa.variants, *sb.variants]):
        x, y = sa.variant(v), sb.variant(v)
        rows.append([v, *[f"{fmt(getattr(x, k))} / {fmt(getattr(y, k))}" for k, _ in COMPARE_KEYS], f"{_downstream(x)} / {_downstream(y)}"])
    lines = [f"Comparing A = `{a}` and B = `{b}` (cells: A / B).", "", *md_table(head, rows)]
    ca = {c.number: c.verdict for c in sa.checks}
    cb = {c.number: c.verdict for c in sb.checks}
    if ca or cb:
        names = {c.number: c.name for c in [*sa.checks, *sb.checks]}
        lines += ["", *md_table(["check", "A", "B"], [[f"{n}. {names[n]}", ca.get(n), cb.get(n)] for n in sorted(names)])]
    return "\n".join(lines) + "\n"
