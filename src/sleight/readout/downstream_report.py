"""Reports of the downstream commands (forecast, P(True)): blocks of :mod:`sleight.render`, and PNG plots.

A report is built as a :class:`sleight.render.Report` (heading, paragraph, table, figure, code
blocks) from the summary (:class:`~sleight.readout.forecast.pipeline.ForecastSummary`,
:class:`~sleight.readout.ptrue.pipeline.PTrueSummary`), the run's description (:class:`RunMeta`,
also the head of summary.json) and the per-row readings; :mod:`sleight.render` renders the same
blocks to Markdown and to a self-contained HTML page (figures embedded), with its one cell
formatter, and both files are written atomically. :func:`roc_points` is the only maths here;
:func:`forecast_lines` and :func:`ptrue_lines` are what the commands print.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sleight import rundir
from sleight.render import (
    MISSING,
    Code,
    Figure,
    Heading,
    Para,
    Report,
    Table,
    fmt,
    interval,
    is_missing,
    to_html,
    to_markdown,
    top_count,
)

if TYPE_CHECKING:  # the pipelines are imported where a report needs them
    from sleight.readout.forecast.pipeline import ForecastSummary, ReaderSummary
    from sleight.readout.ptrue.pipeline import PTrueSummary, SettingSummary
    from sleight.stats.downstream import JsonRecord, PairedDifference

__all__ = ["Code", "Figure", "Heading", "Para", "Report", "RunMeta", "Table", "forecast_report", "ptrue_report", "write_report"]


@dataclass(frozen=True)
class RunMeta:
    """The run's description: what heads summary.json and fills the report's Run table, taken from
    the manifest (kind, command line, items file, model) with the scoring's ``B`` and ``seed``, so the
    report reads attributes rather than walking the manifest. Field names and order are summary.json's
    keys; ``instruct`` (the rendering of the P(True) prompt, lm-polygraph's instruct flag) is written
    for ptrue runs only. Values from an older manifest that lacks a key are None."""

    kind: str | None
    command: str | None
    items: str | None
    n_items: int | None
    model: Mapping[str, object] | None  # the model's description (model_id, engine, dtype, device, revision, ...)
    instruct: bool | None
    seconds: float | None
    B: int
    seed: int

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any], seconds: float | None, B: int, seed: int) -> RunMeta:
        instruct = (manifest.get("config") or {}).get("instruct", True) if manifest.get("kind") == "ptrue" else None
        get = manifest.get
        return cls(get("kind"), get("command"), get("items"), get("n_items"), get("model"), instruct, seconds, B, seed)

    def as_json(self) -> dict[str, object]:
        """The description as summary.json's first keys."""
        out: dict[str, object] = {"kind": self.kind, "command": self.command, "items": self.items, "n_items": self.n_items}
        out["model"] = self.model
        if self.kind == "ptrue":
            out["instruct"] = self.instruct
        out.update(seconds=self.seconds, B=self.B, seed=self.seed)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunMeta:
        """The description back from summary.json (the summary's own keys there are ignored)."""
        get = d.get
        described = (get("kind"), get("command"), get("items"), get("n_items"), get("model"), get("instruct"), get("seconds"))
        return cls(*described, B=int(d["B"]), seed=int(d["seed"]))


def write_report(report: Report, folder: Path) -> tuple[Path, Path]:
    """report.md and report.html of ``report``, each written atomically."""
    md, page = folder / "report.md", folder / "report.html"
    rundir.write_text(md, to_markdown(report))
    rundir.write_text(page, to_html(report, folder))
    return md, page


def _ci(d: JsonRecord | None, key: str = "estimate") -> str:
    """``0.612 [0.401, 0.800]`` of an interval record; the missing mark when the metric is undefined
    (one class only)."""
    return interval(None if d is None else d.as_json(), key=key)


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


def _save_png(plt: Any, fig: Any, path: Path) -> Path:
    """``fig`` as a PNG written atomically to ``path``, then closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    rundir.write_bytes(path, buf.getvalue())
    plt.close(fig)
    return path


def plot_roc(curves: Mapping[str, tuple[Sequence[float], Sequence[float], float | None]], path: Path, title: str) -> Path:
    """One ROC curve per readout: ``name -> (scores, labels, auroc)``."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 5.0), dpi=110)
    ax.plot([0, 1], [0, 1], color="#999", lw=1, ls="--", label="chance")
    for name, (scores, labels, auc) in curves.items():
        fpr, tpr = roc_points(scores, labels)
        ax.plot(fpr, tpr, lw=1.8, marker="o", ms=2.5, label=f"{name} (AUROC {fmt(auc, digits=2)})")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_xlim(-0.01, 1.01)
    ax.set_ylim(-0.01, 1.01)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return _save_png(plt, fig, path)


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
    return _save_png(plt, fig, path)


# ---------------------------------------------------------------------------------------------
# the two reports
# ---------------------------------------------------------------------------------------------

UNDEFINED = f"{MISSING}: undefined (the target has one class only)."
CAVEAT = (
    "The default model is SmolLM2-135M-Instruct, a 135M-parameter model: these numbers say what the "
    "pipeline measures on it, on a few dozen project-written items, not what a capable model does. "
    "Intervals are 95% percentile bootstrap intervals; with this few items they are wide."
)


def _run_table(meta: RunMeta) -> Table:
    info = meta.model or {}
    rows = [
        ["model", f"{info.get('model_id', '?')} ({info.get('engine', '?')}, {info.get('dtype', '?')}, {info.get('device', '?')})"],
        ["model file sha256", str(info.get("revision", ""))[:16] or MISSING],
        ["chat template sha256", str(info.get("chat_template_sha256", ""))[:16] or MISSING],
        ["items", f"{meta.items} ({meta.n_items} used)"],
        ["bootstrap", f"B = {meta.B}, seed {meta.seed}, percentile intervals"],
        ["command", f"`{meta.command}`"],
        ["wall time", f"{fmt(meta.seconds, digits=1)} s"],
    ]
    return Table(["", "value"], rows)


def _forecast_method(summary: ForecastSummary) -> list[Any]:
    """What the forecast run measured: the note, the reader, the forecast, and the prompts."""
    from sleight.readout.audit.notes import writer_prompt
    from sleight.readout.audit.presets import FORECAST_QUESTION, FORECAST_STEM

    n = summary.notes
    return [
        Heading("What was measured"),
        Para(
            f"For each item the model wrote its own note about the passage with App. H's writer (greedy, kept when it ends at "
            f"end-of-sequence with 1 to {n.max_words} words, an over-budget or unfinished attempt retried up to "
            f"{n.retries} times at a smaller budget; {fmt(n.kept)} of {summary.n_items} notes kept, "
            f"{fmt(n.retried)} after a retry, mean {fmt(n.mean_words, digits=1)} words; an item without a kept note "
            "is read with an empty note). Then, reading only the note and the quoted item, it picked "
            "the option A-D with the highest full-sequence log-probability: that reader's correctness against the gold letter "
            "is the target. Finally it was asked to forecast how many of 100 such readers answer correctly, read at the "
            "original position (after the generation prompt) and at the stemmed position "
            f"(`{FORECAST_STEM}` prefilled), renormalised over 10, 30, 50, 70, 90: p_S = sum(int(o)/100 * p_o)."
        ),
        Code("Note prompt (first attempt):\n" + writer_prompt("{passage}") + "\n\nForecast question:\n" + FORECAST_QUESTION),
    ]


def _reader_table(rd: ReaderSummary) -> Table:
    """The note-only reader with unspaced and spaced option strings."""
    return Table(
        ["option strings", "accuracy", "choices", "median option mass", "below floor"],
        [
            ["unspaced `A`..`D`" + (" (target)" if rd.target == "unspaced" else ""), fmt(rd.accuracy), fmt(rd.choices), fmt(rd.mass.median), f"{rd.mass.below_floor}/{rd.mass.n}"],
            ["spaced ` A`..` D`" + (" (target)" if rd.target == "spaced" else ""), fmt(rd.accuracy_spaced), fmt(rd.choices_spaced), fmt(rd.mass_spaced.median), f"{rd.mass_spaced.below_floor}/{rd.mass_spaced.n}"],
        ],
        note=(
            f"Spaced and unspaced readers pick the same letter on {rd.n_agree} of {rd.n_compared} items "
            f"(agreement {fmt(rd.spaced_unspaced_agreement)}). Gold letters: {fmt(rd.gold)}."
        ),
    )


def _positions_table(summary: ForecastSummary) -> Table:
    """Per position: how well the forecast ranks correctness, its calibration and its option mass."""
    from sleight.readout.forecast.pipeline import POSITIONS

    pos = summary.positions
    return Table(
        ["position", "AUROC [95% CI]", "Brier [95% CI]", "mean forecast", "median mass", "min mass", "below floor", "argmax", "continuation"],
        [
            [
                p,
                _ci(pos[p].auroc),
                _ci(pos[p].brier),
                fmt(pos[p].mean_forecast),
                fmt(pos[p].mass.median, digits=4),
                fmt(pos[p].mass.min, digits=4),
                f"{pos[p].mass.below_floor}/{pos[p].mass.n}",
                top_count(pos[p].argmax_class),
                top_count(pos[p].continuation_class),
            ]
            for p in POSITIONS
        ],
        note=(
            f"Scored on {summary.n_scored} items in {summary.n_clusters} passage clusters. Brier references: a constant "
            f"forecast of 0.5 scores {fmt(summary.brier_reference.constant_half)}; the in-sample base rate "
            f"({fmt(summary.brier_reference.base_rate_value)}) scores {fmt(summary.brier_reference.base_rate)}. "
            "Mass is the probability of the options' distinct first tokens at the scored position (floor 0.5). "
            f"{UNDEFINED}"
        ),
    )


def _gain_row(m: str, d: PairedDifference | None) -> list[str]:
    """One metric's gain: the two estimates, the gain and its interval (missing marks without scored items)."""
    if d is None:
        return [m, fmt(None), fmt(None), fmt(None), f"[{fmt(None)}, {fmt(None)}]"]
    return [m, fmt(d.estimate_a), fmt(d.estimate_b), fmt(d.gain), f"[{fmt(d.gain_low)}, {fmt(d.gain_high)}]"]


def _gain_table(g: Mapping[str, PairedDifference | None]) -> Table:
    """Stem minus original for AUROC and Brier, with the paired bootstrap interval of the gain."""
    return Table(
        ["metric", "stem", "original", "gain (positive = stem better)", "95% CI of the gain"],
        [_gain_row(m, g[m]) for m in ("auroc", "brier")],
        note="Both positions are resampled on the same replicates, whole passages at a time (clusters = passages; one item per passage makes them items).",
    )


Curve = tuple[list[Any], list[Any], float | None]
Panel = tuple[list[Any], list[Any], list[Any]]


def _curve_and_panel(rows: Sequence[Mapping[str, Any]], target: Sequence[Any], auc: float | None, shown: Sequence[Any] | None = None) -> tuple[Curve, Panel]:
    """One readout's ROC curve (scores, targets, AUROC) and mass panel (option mass, ``shown``
    scores (default: the scores), targets) from its scored rows."""
    scores = [r["score"] for r in rows]
    return (scores, list(target), auc), ([r["option_mass"] for r in rows], list(shown if shown is not None else scores), list(target))


def _plot_pair(folder: Path, names: tuple[str, str], curves: Mapping[str, Curve], panels: Mapping[str, Panel], titles: tuple[str, str], score_label: str) -> None:
    """The ROC plot and the mass-against-score plot of one set of readouts, as ``names`` in ``folder``."""
    plot_roc(curves, folder / names[0], titles[0])
    plot_mass_vs_score(panels, folder / names[1], titles[1], score_label=score_label)


def _forecast_figures(summary: ForecastSummary, rows: Sequence[Mapping[str, Any]], folder: Path) -> list[Any]:
    """Plot the forecast at each position against the reader's correctness; the figure blocks."""
    from sleight.readout.forecast.pipeline import POSITIONS

    curves, panels = {}, {}
    for p in POSITIONS:
        pr = [r for r in rows if r["position"] == p and r["correct"] is not None and r["score"] is not None]
        auc = summary.positions[p].auroc
        curves[p], panels[p] = _curve_and_panel(pr, [float(r["correct"]) for r in pr], None if auc is None else auc.estimate)
    _plot_pair(
        folder, ("roc.png", "mass_vs_score.png"), curves, panels,
        ("Forecast p_S vs the reader's correctness", "Option mass at the scored position vs forecast"), "forecast p_S",
    )
    return [
        Heading("Figures"),
        Figure("roc.png", "ROC curves of the forecast at each position against the reader's correctness."),
        Figure("mass_vs_score.png", "Option mass (log scale; dashed: floor 0.5) against the forecast, coloured by the reader's correctness."),
    ]


def _note_line(r: Mapping[str, Any]) -> str:
    """The example's note: kept after how many attempts, or none (then the last refused attempt)."""
    if r.get("note_ok") is None:  # readings from before App. H's writer (issue 34 item 1)
        return f"Note: {r['note']}"
    if r["note_ok"]:
        return f"Note (attempt {r['note_attempts']}, {len(str(r['note']).split())} words): {r['note']}"
    return f"No note kept after {r['note_attempts']} attempts (the last ended '{r['note_finish']}': {r['note_raw']!r}); read with an empty note."


def _worked_example(summary: ForecastSummary, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The first item at each position: its note, the reader's pick and what the forecast read (none without rows)."""
    ex = [r for r in rows if r["item_id"] == rows[0]["item_id"]] if rows else []
    if not ex:
        return []
    r0 = ex[0]
    return [
        Heading(f"Worked example: item {r0['item_id']}"),
        Para(_note_line(r0)),
        Para(f"Reader picked **{r0['reader_choice']}** (spaced: {r0['reader_choice_spaced']}); gold **{r0['gold']}** -> target {int(bool(r0['correct'])) if r0['correct'] is not None else MISSING}."),
        Table(
            ["position", "rendered ending", "top next tokens", "option mass", "p(10..90)", "forecast p_S", "continuation"],
            [
                [
                    r["position"],
                    f"`{(r.get('context_tail') or '')[-48:]!r}`",
                    ", ".join(f"{t['token']!r} {t['prob']:.2f}" for t in (r.get("top_tokens") or [])[:4]),
                    fmt(r["option_mass"], digits=4),
                    " / ".join(f"{p:.2f}" for p in (r.get("option_probs") or [])),
                    fmt(r["score"]),
                    f"{r.get('continuation')!r}",
                ]
                for r in ex
            ],
        ),
    ]


def forecast_report(summary: ForecastSummary, rows: Sequence[Mapping[str, Any]], meta: RunMeta, folder: Path) -> Report:
    """The reader-forecast report; writes its plots into ``folder``."""
    rep = Report("Reader forecast: does the forecast rank the reader's correctness?")
    rep.add(Para(CAVEAT), Heading("Run"), _run_table(meta))
    rep.add(*_forecast_method(summary))
    rep.add(Heading("The note-only reader"), _reader_table(summary.reader))
    rep.add(Heading("Does the forecast rank correctness?"), _positions_table(summary))
    rep.add(Heading("Stem minus original (paired cluster bootstrap)"), _gain_table(summary.gain))
    rep.add(*_forecast_figures(summary, rows, folder))
    rep.add(*_worked_example(summary, rows))
    return rep


def _ptrue_method(meta: RunMeta) -> list[Any]:
    """What the P(True) run measured: the prompt, its five readings, and the two answer settings."""
    from sleight.readout.ptrue.readouts import PTRUE_TEMPLATE

    rendering = (
        "wrapped as one user turn with the generation prompt"
        if meta.instruct is not False  # None: not recorded, lm-polygraph's default (instruct)
        else "as a raw prompt string with no chat template (lm-polygraph's instruct=False)"
    )
    return [
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
    ]


def _readouts_table(s: SettingSummary) -> Table:
    """One setting's five readouts: AUROC, PRR, options, option mass and what the model would say."""
    from sleight.readout.ptrue.readouts import READOUT_LABELS
    from sleight.readout.ptrue.readouts import READOUT_NAMES as READOUTS

    return Table(
        ["readout", "n", "AUROC [95% CI]", "PRR [95% CI]", "options", "median mass", "below floor", "argmax class", "argmax token", "continuation"],
        [
            [
                READOUT_LABELS[r],
                str(d.n_scored),
                _ci(d.auroc),
                _ci(d.prr),
                " / ".join(f"`{o}`" for o in d.options),
                fmt(d.mass.median, digits=4),
                f"{d.mass.below_floor}/{d.mass.n}",
                top_count(d.argmax_class),
                top_count(d.argmax_token),
                top_count(d.continuation_class),
            ]
            for r in READOUTS
            for d in (s.readouts[r],)
        ],
        note=(
            "Library and Renormalised share one scored position, so their mass and argmax are the same; mass is over the "
            f"readout's own options' distinct first tokens (floor 0.5). {UNDEFINED}"
        ),
    )


def _vs_library_table(s: SettingSummary) -> Table:
    """One setting's readouts minus Library, on the paired bootstrap."""
    from sleight.readout.ptrue.readouts import READOUT_LABELS
    from sleight.readout.ptrue.readouts import READOUT_NAMES as READOUTS

    return Table(
        ["readout minus Library", "ΔAUROC [95% CI]", "ΔPRR [95% CI]"],
        [
            [
                READOUT_LABELS[r],
                _ci(s.vs_library[r]["auroc"], "diff"),
                _ci(s.vs_library[r]["prr"], "diff"),
            ]
            for r in READOUTS
            if r != "library"
        ],
        note="Paired cluster bootstrap: both readouts are evaluated on the same resampled items in every replicate.",
    )


def _ptrue_figures(setting: str, s: SettingSummary, srows: Sequence[Mapping[str, Any]], folder: Path) -> list[Any]:
    """Plot one setting's five readouts against the label; the figure blocks."""
    from sleight.readout.ptrue.readouts import READOUT_LABELS
    from sleight.readout.ptrue.readouts import READOUT_NAMES as READOUTS

    curves, panels = {}, {}
    for r in READOUTS:
        rr = [x for x in srows if x["readout"] == r and x["score"] is not None]
        m = s.readouts[r].auroc
        auc = None if m is None else m.estimate
        prob = [math.exp(x["score"]) if r == "library" else x["score"] for x in rr]
        curves[READOUT_LABELS[r]], panels[READOUT_LABELS[r]] = _curve_and_panel(rr, [x["label"] for x in rr], auc, prob)
    roc, scat = f"roc_{setting}.png", f"mass_vs_score_{setting}.png"
    _plot_pair(
        folder, (roc, scat), curves, panels,
        (f"P(True) readouts vs correctness ({setting})", f"Option mass vs score ({setting})"), "score (Library: P(True))",
    )
    return [
        Figure(roc, f"ROC curves of the five readouts ({setting} answers)."),
        Figure(scat, f"Option mass at each readout's scored position (log scale; dashed: floor 0.5) against its score ({setting})."),
    ]


def _own_answers_table(srows: Sequence[Mapping[str, Any]]) -> Table:
    """The first of the model's own answers, with their labels and Library P(True)."""
    lib = [x for x in srows if x["readout"] == "library"][:8]
    return Table(
        ["item", "model's answer", "matched", "label", "Library P(True)"],
        [[x["item_id"], (x["answer"][:90] + ("..." if len(x["answer"]) > 90 else "")), str(x["matched"]), str(int(x["label"])), fmt(x["library_prob"])] for x in lib],
        note="The first answers of this setting (all are in readings.parquet).",
    )


def ptrue_report(summary: PTrueSummary, rows: Sequence[Mapping[str, Any]], meta: RunMeta, folder: Path) -> Report:
    """The P(True) report; writes its plots into ``folder``."""
    rep = Report("P(True): do five readouts of the same prompt rank answer correctness?")
    rep.add(Para(CAVEAT), Heading("Run"), _run_table(meta))
    rep.add(*_ptrue_method(meta))
    for setting, s in summary.settings.items():
        rep.add(Heading(f"Setting: {setting}"))
        rep.add(Para(f"{s.n_pairs} pairs in {s.n_clusters} clusters; {s.n_correct} labelled correct ({fmt(s.rate_correct)})."))
        rep.add(_readouts_table(s), _vs_library_table(s))
        srows = [r for r in rows if r["setting"] == setting]
        rep.add(*_ptrue_figures(setting, s, srows, folder))
        if setting == "own":
            rep.add(_own_answers_table(srows))
    return rep


# ---------------------------------------------------------------------------------------------
# what the commands print
# ---------------------------------------------------------------------------------------------


def _gain(d: PairedDifference | None) -> str:
    if d is None or is_missing(d.gain):
        return MISSING
    return f"{fmt(d.gain)} [{fmt(d.gain_low)}, {fmt(d.gain_high)}]"


def forecast_lines(summary: ForecastSummary) -> list[str]:
    """The forecast run in a few lines: the reader, each position, the gain."""
    rd, pos, g = summary.reader, summary.positions, summary.gain
    lines = [f"reader accuracy {fmt(rd.accuracy)} (spaced {fmt(rd.accuracy_spaced)}; spaced/unspaced agree on {rd.n_agree}/{rd.n_compared})"]
    for p in ("original", "stem"):
        lines.append(f"{p:>8}: AUROC {_ci(pos[p].auroc)}  Brier {_ci(pos[p].brier)}  median mass {fmt(pos[p].mass.median)}")
    lines.append(f"stem - original: AUROC gain {_gain(g['auroc'])}  Brier gain {_gain(g['brier'])}  (constant-0.5 Brier 0.250)")
    return lines


def ptrue_lines(summary: PTrueSummary) -> list[str]:
    """The P(True) run in a few lines: per setting, each readout's AUROC, PRR, mass and argmax."""
    from sleight.readout.ptrue.readouts import READOUT_LABELS

    lines = []
    for setting, st in summary.settings.items():
        lines.append(f"[{setting}] {st.n_pairs} pairs, {st.n_correct} correct")
        for r, d in st.readouts.items():
            lines.append(
                f"  {READOUT_LABELS[r]:<16} AUROC {_ci(d.auroc)}  PRR {_ci(d.prr)}  median mass {fmt(d.mass.median)}  "
                f"argmax {next(iter(d.argmax_class), MISSING)}"
            )
    return lines
