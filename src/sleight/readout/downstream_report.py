"""Reports of the downstream commands: Markdown and HTML from one list of blocks, and PNG plots.

A report is built as a list of blocks (heading, paragraph, table, figure, code) from the summary
dictionary and the per-row readings; the same blocks render to Markdown and to a self-contained
HTML page (figures embedded), so the two never disagree. :func:`roc_points` is the only maths here.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------------
# blocks and rendering
# ---------------------------------------------------------------------------------------------


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
    rows: Sequence[Sequence[str]]
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
            def cells(row: Sequence[Any]) -> str:
                return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |"

            out += [cells(b.headers), "|" + "|".join("---" for _ in b.headers) + "|", *(cells(r) for r in b.rows), ""]
            if b.note:
                out += [b.note, ""]
        elif isinstance(b, Figure):
            out += [f"![{b.caption}]({b.file})", "", f"*{b.caption}*", ""]
        elif isinstance(b, Code):
            fence = "````" if "```" in b.text else "```"
            out += [fence, b.text, fence, ""]
    return "\n".join(out).rstrip() + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:68rem;margin:2rem auto;padding:0 1rem;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.92rem}
th,td{border:1px solid #ccc;padding:.25rem .55rem;text-align:right;vertical-align:top}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;white-space:pre-wrap}
figure{margin:1rem 0}figcaption{font-size:.9rem;color:#555}img{max-width:100%}
.note{font-size:.9rem;color:#555}
"""


def _inline(text: str) -> str:
    """Escape, then the two Markdown marks the reports use: `code` and **bold**."""
    import re

    s = html.escape(text)
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)


def to_html(report: Report, folder: Path | None = None) -> str:
    """A standalone page; figures found in ``folder`` are embedded as data URIs."""
    out = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{html.escape(report.title)}</title>", f"<style>{_CSS}</style></head><body>", f"<h1>{html.escape(report.title)}</h1>"]
    for b in report.blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(str(h))}</th>" for h in b.headers)
            body = "".join("<tr>" + "".join(f"<td>{_inline(str(c))}</td>" for c in r) + "</tr>" for r in b.rows)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            if b.note:
                out.append(f'<p class="note">{_inline(b.note)}</p>')
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


def write_report(report: Report, folder: Path) -> tuple[Path, Path]:
    md, page = folder / "report.md", folder / "report.html"
    md.write_text(to_markdown(report), encoding="utf-8")
    page.write_text(to_html(report, folder), encoding="utf-8")
    return md, page


# ---------------------------------------------------------------------------------------------
# number formatting
# ---------------------------------------------------------------------------------------------


def num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return str(int(x))
    return f"{float(x):.{digits}f}"


def with_ci(d: Mapping[str, Any] | None, key: str = "estimate", low: str = "low", high: str = "high", digits: int = 3) -> str:
    """``0.612 [0.401, 0.800]``; "n/a (one class)" when the metric is undefined."""
    if not d or d.get(key) is None:
        return "n/a (undefined: one class only)"
    if d.get(low) is None:
        return num(d[key], digits)
    return f"{num(d[key], digits)} [{num(d[low], digits)}, {num(d[high], digits)}]"


def top_count(c: Mapping[str, int] | None) -> str:
    """``answer_letter 27/28`` -- the most common value and its share."""
    if not c:
        return "n/a"
    total = sum(c.values())
    key = next(iter(c))
    return f"{key} {c[key]}/{total}"


def all_counts(c: Mapping[str, int] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in (c or {}).items()) or "n/a"


# ---------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------


def roc_points(scores: Sequence[float], labels: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """ROC curve vertices (FPR, TPR) from (0, 0) to (1, 1); tied scores form one diagonal step,
    which is what makes the area under these points equal the tie-averaged AUROC."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    n_pos, n_neg = y.sum(), (1 - y).sum()
    if n_pos == 0 or n_neg == 0:
        return np.array([0.0, 1.0]), np.array([0.0, 1.0])
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s) != 0), s.size - 1]
    tp, fp = np.cumsum(y)[last], np.cumsum(1 - y)[last]
    return np.r_[0.0, fp / n_neg], np.r_[0.0, tp / n_pos]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_roc(curves: Mapping[str, tuple[Sequence[float], Sequence[float], float | None]], path: Path, title: str) -> Path:
    """One ROC curve per readout: ``name -> (scores, labels, auroc)``."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 5.0), dpi=110)
    ax.plot([0, 1], [0, 1], color="#999", lw=1, ls="--", label="chance")
    for name, (scores, labels, auc) in curves.items():
        fpr, tpr = roc_points(scores, labels)
        ax.plot(fpr, tpr, lw=1.8, marker="o", ms=2.5, label=f"{name} (AUROC {num(auc, 2)})")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_xlim(-0.01, 1.01)
    ax.set_ylim(-0.01, 1.01)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_mass_vs_score(panels: Mapping[str, tuple[Sequence[float | None], Sequence[float | None], Sequence[float]]], path: Path, title: str, floor: float = 0.5, score_label: str = "score") -> Path:
    """Per readout, option mass at its scored position (x) against its score (y), coloured by the
    target; the floor line shows where the readout stops reading a distribution over its options."""
    plt = _plt()
    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3.3), dpi=110, squeeze=False)
    every = np.asarray([v for mass, _, _ in panels.values() for v in mass if v is not None and v > 0], dtype=np.float64)
    lo = max(1e-6, float(every.min()) / 2) if every.size else 1e-6  # one x range for all panels
    for ax, (name, (mass, score, label)) in zip(axes[0], panels.items()):
        m = np.asarray([np.nan if v is None else v for v in mass], dtype=np.float64)
        s = np.asarray([np.nan if v is None else v for v in score], dtype=np.float64)
        y = np.asarray(label, dtype=np.float64)
        for val, colour, lab in ((1.0, "#1b7837", "target 1"), (0.0, "#c51b7d", "target 0")):
            k = (y == val) & np.isfinite(m) & np.isfinite(s)
            ax.scatter(m[k], s[k], s=14, alpha=0.75, color=colour, label=lab)
        ax.axvline(floor, color="#999", lw=1, ls="--")
        ax.set_xscale("log")
        ax.set_xlim(lo, 1.05)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("option mass (log)")
    axes[0][0].set_ylabel(score_label)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------
# the two reports
# ---------------------------------------------------------------------------------------------

CAVEAT = (
    "The default model is SmolLM2-135M-Instruct, a 135M-parameter model: these numbers say what the "
    "pipeline measures on it, on a few dozen project-written items, not what a capable model does. "
    "Intervals are 95% percentile bootstrap intervals; with this few items they are wide."
)


def _run_table(meta: Mapping[str, Any]) -> Table:
    info = meta.get("model", {})
    rows = [
        ["model", f"{info.get('model_id', '?')} ({info.get('engine', '?')}, {info.get('dtype', '?')}, {info.get('device', '?')})"],
        ["model file sha256", str(info.get("revision", ""))[:16] or "n/a"],
        ["chat template sha256", str(info.get("chat_template_sha256", ""))[:16] or "n/a"],
        ["items", f"{meta.get('items', '?')} ({meta.get('n_items', '?')} used)"],
        ["bootstrap", f"B = {meta.get('B')}, seed {meta.get('seed')}, percentile intervals"],
        ["command", f"`{meta.get('command', '')}`"],
        ["wall time", f"{num(meta.get('seconds'), 1)} s"],
    ]
    return Table(["", "value"], rows)


def forecast_report(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], folder: Path) -> Report:
    """The reader-forecast report; writes its plots into ``folder``."""
    from sleight.readout.audit.presets import FORECAST_QUESTION, FORECAST_STEM
    from sleight.readout.forecast.pipeline import NOTE_PROMPT, POSITIONS

    rep = Report("Reader forecast: does the forecast rank the reader's correctness?")
    rep.add(Para(CAVEAT), Heading("Run"), _run_table(meta))
    rep.add(
        Heading("What was measured"),
        Para(
            f"For each item the model wrote a note about the passage (greedy, cut to {summary['notes']['max_words']} words; "
            f"{summary['notes']['truncated']} of {summary['n_items']} notes were cut, mean length before the cut "
            f"{num(summary['notes']['mean_raw_words'], 1)} words). Then, reading only the note and the quoted item, it picked "
            "the option A-D with the highest full-sequence log-probability: that reader's correctness against the gold letter "
            "is the target. Finally it was asked to forecast how many of 100 such readers answer correctly, read at the "
            "original position (after the generation prompt) and at the stemmed position "
            f"(`{FORECAST_STEM}` prefilled), renormalised over 10, 30, 50, 70, 90: p_S = sum(int(o)/100 * p_o)."
        ),
        Code("Note prompt:\n" + NOTE_PROMPT + "\n\nForecast question:\n" + FORECAST_QUESTION),
    )
    rd = summary["reader"]
    rep.add(
        Heading("The note-only reader"),
        Table(
            ["option strings", "accuracy", "choices", "median option mass", "below floor"],
            [
                ["unspaced `A`..`D` (target)", num(rd["accuracy"]), all_counts(rd["choices"]), num(rd["mass"]["median"]), f"{rd['mass']['below_floor']}/{rd['mass']['n']}"],
                ["spaced ` A`..` D`", num(rd["accuracy_spaced"]), all_counts(rd["choices_spaced"]), num(rd["mass_spaced"]["median"]), f"{rd['mass_spaced']['below_floor']}/{rd['mass_spaced']['n']}"],
            ],
            note=(
                f"Spaced and unspaced readers pick the same letter on {rd['n_agree']} of {rd['n_compared']} items "
                f"(agreement {num(rd['spaced_unspaced_agreement'])}). Gold letters: {all_counts(rd['gold'])}."
            ),
        ),
    )
    pos = summary["positions"]
    rep.add(
        Heading("Does the forecast rank correctness?"),
        Table(
            ["position", "AUROC [95% CI]", "Brier [95% CI]", "mean forecast", "median mass", "min mass", "below floor", "argmax", "continuation"],
            [
                [
                    p,
                    with_ci(pos[p]["auroc"]),
                    with_ci(pos[p]["brier"]),
                    num(pos[p]["mean_forecast"]),
                    num(pos[p]["mass"]["median"], 4),
                    num(pos[p]["mass"]["min"], 4),
                    f"{pos[p]['mass']['below_floor']}/{pos[p]['mass']['n']}",
                    top_count(pos[p]["argmax_class"]),
                    top_count(pos[p]["continuation_class"]),
                ]
                for p in POSITIONS
            ],
            note=(
                f"Scored on {summary['n_scored']} items in {summary['n_clusters']} passage clusters. Brier references: a constant "
                f"forecast of 0.5 scores {num(summary['brier_reference']['constant_0.5'])}; the in-sample base rate "
                f"({num(summary['brier_reference']['base_rate_value'])}) scores {num(summary['brier_reference']['base_rate'])}. "
                "Mass is the probability of the options' distinct first tokens at the scored position (floor 0.5)."
            ),
        ),
    )
    g = summary["gain"]
    rep.add(
        Heading("Stem minus original (paired cluster bootstrap)"),
        Table(
            ["metric", "stem", "original", "gain (positive = stem better)", "95% CI of the gain"],
            [
                [m, num((g[m] or {}).get("estimate_a")), num((g[m] or {}).get("estimate_b")), num((g[m] or {}).get("gain")), f"[{num((g[m] or {}).get('gain_low'))}, {num((g[m] or {}).get('gain_high'))}]"]
                for m in ("auroc", "brier")
            ],
            note="Both positions are resampled on the same replicates, whole passages at a time (clusters = passages; one item per passage makes them items).",
        ),
    )
    curves, panels = {}, {}
    for p in POSITIONS:
        pr = [r for r in rows if r["position"] == p and r["correct"] is not None and r["score"] is not None]
        y = [float(r["correct"]) for r in pr]
        curves[p] = ([r["score"] for r in pr], y, (pos[p]["auroc"] or {}).get("estimate"))
        panels[p] = ([r["option_mass"] for r in pr], [r["score"] for r in pr], y)
    plot_roc(curves, folder / "roc.png", "Forecast p_S vs the reader's correctness")
    plot_mass_vs_score(panels, folder / "mass_vs_score.png", "Option mass at the scored position vs forecast", score_label="forecast p_S")
    rep.add(
        Heading("Figures"),
        Figure("roc.png", "ROC curves of the forecast at each position against the reader's correctness."),
        Figure("mass_vs_score.png", "Option mass (log scale; dashed: floor 0.5) against the forecast, coloured by the reader's correctness."),
    )
    ex = [r for r in rows if r["item_id"] == rows[0]["item_id"]] if rows else []
    if ex:
        r0 = ex[0]
        rep.add(
            Heading(f"Worked example: item {r0['item_id']}"),
            Para(f"Note ({r0['note_raw_words']} words written, {min(r0['note_raw_words'], summary['notes']['max_words'])} kept): {r0['note']}"),
            Para(f"Reader picked **{r0['reader_choice']}** (spaced: {r0['reader_choice_spaced']}); gold **{r0['gold']}** -> target {int(bool(r0['correct'])) if r0['correct'] is not None else 'n/a'}."),
            Table(
                ["position", "rendered ending", "top next tokens", "option mass", "p(10..90)", "forecast p_S", "continuation"],
                [
                    [
                        r["position"],
                        f"`{(r.get('context_tail') or '')[-48:]!r}`",
                        ", ".join(f"{t['token']!r} {t['prob']:.2f}" for t in (r.get("top_tokens") or [])[:4]),
                        num(r["option_mass"], 4),
                        " / ".join(f"{p:.2f}" for p in (r.get("option_probs") or [])),
                        num(r["score"]),
                        f"{r.get('continuation')!r}",
                    ]
                    for r in ex
                ],
            ),
        )
    return rep


def ptrue_report(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], folder: Path) -> Report:
    """The P(True) report; writes its plots into ``folder``."""
    from sleight.readout.ptrue.readouts import PTRUE_TEMPLATE, READOUT_LABELS
    from sleight.readout.ptrue.readouts import READOUT_NAMES as READOUTS

    rep = Report("P(True): do five readouts of the same prompt rank answer correctness?")
    rendering = (
        "wrapped as one user turn with the generation prompt"
        if meta.get("instruct", True)
        else "as a raw prompt string with no chat template (lm-polygraph's instruct=False)"
    )
    rep.add(Para(CAVEAT), Heading("Run"), _run_table(meta))
    rep.add(
        Heading("What was measured"),
        Para(
            f"lm-polygraph's P(True) prompt, {rendering}, read five ways. **Library**: "
            "log P(True) of the bare token `True` at the next position, with lm-polygraph 0.7.0's convention (EOS logit set "
            "to -inf by min_new_tokens=1, then -inf replaced by the row's smallest finite logit, then log-softmax). "
            "**Renormalised**: P(True)/(P(True)+P(False)) there, plain log-softmax. **Labels in place**: `(A` vs `(B` there. "
            "**Moved**: `A` vs `B` after the stem `The possible answer is (`. **Deleted**: True vs False with the True/False "
            "instruction removed. PRR uses the label (1 correct, 0 wrong) as quality."
        ),
        Code(PTRUE_TEMPLATE),
        Para(
            "Settings: **own** -- the model's own greedy answer, labelled by the correctness rule (first standalone letter for "
            "lettered items, alias match on word boundaries for free answers); this is the usual lm-polygraph setting. "
            "**constructed** -- each question with its gold answer (label 1) and a plausible wrong answer (label 0); the two "
            "rows of a question are one bootstrap cluster."
        ),
    )
    for setting, s in summary["settings"].items():
        rep.add(Heading(f"Setting: {setting}"))
        rep.add(Para(f"{s['n_pairs']} pairs in {s['n_clusters']} clusters; {s['n_correct']} labelled correct ({num(s['rate_correct'])})."))
        rep.add(
            Table(
                ["readout", "n", "AUROC [95% CI]", "PRR [95% CI]", "options", "median mass", "below floor", "argmax class", "argmax token", "continuation"],
                [
                    [
                        READOUT_LABELS[r],
                        str(s["readouts"][r]["n_scored"]),
                        with_ci(s["readouts"][r]["auroc"]),
                        with_ci(s["readouts"][r]["prr"]),
                        " / ".join(f"`{o}`" for o in s["readouts"][r]["options"]),
                        num(s["readouts"][r]["mass"]["median"], 4),
                        f"{s['readouts'][r]['mass']['below_floor']}/{s['readouts'][r]['mass']['n']}",
                        top_count(s["readouts"][r]["argmax_class"]),
                        top_count(s["readouts"][r]["argmax_token"]),
                        top_count(s["readouts"][r]["continuation_class"]),
                    ]
                    for r in READOUTS
                ],
                note="Library and Renormalised share one scored position, so their mass and argmax are the same; mass is over the readout's own options' distinct first tokens (floor 0.5).",
            )
        )
        rep.add(
            Table(
                ["readout minus Library", "ΔAUROC [95% CI]", "ΔPRR [95% CI]"],
                [
                    [
                        READOUT_LABELS[r],
                        with_ci(s["vs_library"][r]["auroc"], "diff"),
                        with_ci(s["vs_library"][r]["prr"], "diff"),
                    ]
                    for r in READOUTS
                    if r != "library"
                ],
                note="Paired cluster bootstrap: both readouts are evaluated on the same resampled items in every replicate.",
            )
        )
        srows = [r for r in rows if r["setting"] == setting]
        curves, panels = {}, {}
        for r in READOUTS:
            rr = [x for x in srows if x["readout"] == r and x["score"] is not None]
            auc = (s["readouts"][r]["auroc"] or {}).get("estimate")
            curves[READOUT_LABELS[r]] = ([x["score"] for x in rr], [x["label"] for x in rr], auc)
            prob = [math.exp(x["score"]) if r == "library" else x["score"] for x in rr]
            panels[READOUT_LABELS[r]] = ([x["option_mass"] for x in rr], prob, [x["label"] for x in rr])
        roc, scat = f"roc_{setting}.png", f"mass_vs_score_{setting}.png"
        plot_roc(curves, folder / roc, f"P(True) readouts vs correctness ({setting})")
        plot_mass_vs_score(panels, folder / scat, f"Option mass vs score ({setting})", score_label="score (Library: P(True))")
        rep.add(
            Figure(roc, f"ROC curves of the five readouts ({setting} answers)."),
            Figure(scat, f"Option mass at each readout's scored position (log scale; dashed: floor 0.5) against its score ({setting})."),
        )
        if setting == "own":
            lib = [x for x in srows if x["readout"] == "library"][:8]
            rep.add(
                Table(
                    ["item", "model's answer", "matched", "label", "Library P(True)"],
                    [[x["item_id"], (x["answer"][:90] + ("..." if len(x["answer"]) > 90 else "")), str(x["matched"]), str(int(x["label"])), num(x["library_prob"])] for x in lib],
                    note="The first answers of this setting (all are in readings.parquet).",
                )
            )
    return rep
